#!/usr/bin/env bash
# chunkline's nightly run for cron: `chunkline run`, its exit status mapped to ok, retry later
# or page (pipeline/exits.py; docs/operations.md, "Exit codes"), one log line per decision. No flock: the
# run holds the output's lease itself and exits 75 while another run holds it.
#
#   # crontab -e, as the user who owns the index:
#   MAILTO=oncall@example.com
#   PATH=/opt/chunkline/.venv/bin:/usr/bin:/bin
#   CHUNKLINE_CONFIG=/etc/chunkline/nightly.yaml
#   CHUNKLINE_OUTPUT=/var/lib/chunkline/index
#   CHUNKLINE_SINK=/var/lib/chunkline/lancedb
#   CHUNKLINE_LOG=/var/log/chunkline/nightly.log
#   30 2 * * *  /opt/chunkline/examples/schedule/nightly.sh
#
# With CHUNKLINE_LOG set, chunkline's output and the decision lines go to that file and only a
# page line reaches stderr, so cron mails exactly the pages; CHUNKLINE_PAGE, when set, is a
# command that also gets each page line as its one argument.
#
#   run 0      ok (published; with a `sink:` the run has synced and verified it itself)
#   run 75     another run holds the lease: retry later (CHUNKLINE_ATTEMPTS tries, in all,
#              CHUNKLINE_RETRY_DELAY seconds apart), then page
#   run 3      published, the sink lags: `chunkline sync OUTPUT --to SINK`, itself retried on
#              69 (store unreachable) and 75 (another sync holds the lock), then page;
#              ok once the sync exits 0
#   1, 2       page, no retry: retrying fails the same way (not published / bad config or input)
#   130        interrupted: nothing incomplete was published; no retry, no page
#   any other  page (a crash, a kill, chunkline not on PATH)
# The script exits 0 for ok, otherwise with the status of the chunkline command that decided.
set -euo pipefail

# pipeline/exits.py
readonly OK=0 NOT_DONE=1 USAGE=2 PUBLISHED_SINK_FAILED=3 STORE_UNAVAILABLE=69 BUSY=75 INTERRUPTED=130

config=${CHUNKLINE_CONFIG:?set CHUNKLINE_CONFIG to the YAML config of the run}
output=${CHUNKLINE_OUTPUT:-}
sink=${CHUNKLINE_SINK:-}
attempts=${CHUNKLINE_ATTEMPTS:-6}
delay=${CHUNKLINE_RETRY_DELAY:-600}
page_command=${CHUNKLINE_PAGE:-}

exec 3>&2                      # cron's stderr: pages only, once stdout goes to the log
if [[ -n ${CHUNKLINE_LOG:-} ]]; then
    exec >>"$CHUNKLINE_LOG" 2>&1
fi

say() {
    printf '%s chunkline-nightly: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*"
}

page() {
    local line
    line="page: $*"
    say "$line"
    if [[ -n ${CHUNKLINE_LOG:-} ]]; then
        printf 'chunkline-nightly: %s\n' "$line" >&3
    fi
    if [[ -n $page_command ]]; then
        "$page_command" "chunkline-nightly: $line" || say "the page command $page_command failed"
    fi
}

meaning() {  # $1 command, $2 status
    case "$1 $2" in
        "run $BUSY") echo "another run holds the output's lease" ;;
        "sync $BUSY") echo "another sync holds the store's lock" ;;
        "sync $STORE_UNAVAILABLE") echo "the store cannot be reached or a write failed midway" ;;
        "run $PUBLISHED_SINK_FAILED") echo "published, but the sink's sync failed or lags" ;;
        "run $NOT_DONE") echo "ran, not published: see the run's manifest (held_back, problems)" ;;
        "sync $NOT_DONE") echo "the store differs from the run after the sync (--repair rewrites it)" ;;
        "run $USAGE") echo "bad config, flags or input; retrying fails the same way" ;;
        "sync $USAGE") echo "a usage error (no such run, a URI or store that cannot hold it); retrying fails the same way" ;;
        *" $INTERRUPTED") echo "interrupted" ;;
        *) echo "not a status chunkline $1 documents" ;;
    esac
}

# with_retries COMMAND "RETRYABLE STATUSES" ARGS...: runs `chunkline COMMAND ARGS...` again
# while it exits with a retryable status and attempts are left. Leaves its last status in
# $status, the number of runs in $tries, and exhausted=1 when it stopped on a retryable status.
with_retries() {
    local command=$1 retryable=" $2 "
    shift 2
    exhausted=0
    for ((tries = 1; ; tries++)); do
        status=0
        chunkline "$command" "$@" 3>&- || status=$?
        if [[ $retryable != *" $status "* ]]; then
            return 0
        fi
        if ((tries >= attempts)); then
            exhausted=1
            return 0
        fi
        say "retry-later: $command exit $status ($(meaning "$command" "$status")), attempt $tries/$attempts, next in ${delay}s"
        sleep "$delay"
    done
}

# decide COMMAND: returns for status 0; otherwise writes the final line and exits with $status.
decide() {
    local command=$1 why
    ((status == OK)) && return 0
    why=$(meaning "$command" "$status")
    if ((status == INTERRUPTED)); then
        say "interrupted: $command exit $status; nothing incomplete was published, no retry"
    elif ((exhausted)); then
        page "$command exit $status ($why): gave up after $tries attempts"
    else
        page "$command exit $status ($why)"
    fi
    exit "$status"
}

run_args=(--config "$config")
if [[ -n $output ]]; then
    run_args+=(--output "$output")
fi
with_retries run "$BUSY" "${run_args[@]}"
if ((status == PUBLISHED_SINK_FAILED)); then
    if [[ -z $output || -z $sink ]]; then
        page "run exit $status ($(meaning run "$status")); set CHUNKLINE_OUTPUT and CHUNKLINE_SINK to complete it here, or run: chunkline sync OUTPUT --to SINK"
        exit "$status"
    fi
    say "sync: run exit $status ($(meaning run "$status")); the index is good, completing the sink"
    with_retries sync "$STORE_UNAVAILABLE $BUSY" "$output" --to "$sink"
    decide sync
    say "ok: published; the sink lagged and chunkline sync completed it (attempts: $tries)"
    exit 0
fi
decide run
say "ok: run exit 0, published (attempts: $tries)"
