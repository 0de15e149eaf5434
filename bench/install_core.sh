#!/usr/bin/env bash
# `pip install chunkline` (the core, no extra) into a fresh venv: time, size of site-packages,
# the top-level names chunkline's own files install, and `import chunkline` (median of 5).
#   bench/install_core.sh [SOURCE] [VENV]     (SOURCE: a checkout, default this one)
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
venv=${2:-/tmp/chunkline-core}
rm -rf "$venv"
cd /  # not a checkout: its chunkline/ and egg-info would shadow what was installed
python3 -m venv "$venv"
# CPU seconds beside wall seconds: on a shared machine the wall time is mostly waiting.
/usr/bin/time -f "pip install: %e s wall, %U+%S s CPU" -o "$venv/time.txt" \
  "$venv/bin/pip" install --quiet --no-cache-dir "$src" 2>&1 | grep -v '^WARNING: Location' || true
echo "$(cat "$venv/time.txt")   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "site-packages (MB): $(du -sm "$venv"/lib/python3*/site-packages | cut -f1)   packages: $("$venv/bin/pip" list 2>/dev/null | tail -n +3 | wc -l)"
"$venv/bin/python" - <<'PY'
import importlib.metadata as m
files = m.distribution("chunkline").files
print("chunkline installs top-level:", sorted({f.parts[0] for f in files if not f.parts[0].endswith(".dist-info") and f.parts[0] != ".."}))
PY
for _ in 1 2 3 4 5; do
  "$venv/bin/python" -c "import time; t, c = time.perf_counter(), time.process_time(); import chunkline; print(f'{time.perf_counter() - t:.3f} s wall, {time.process_time() - c:.3f} s CPU')"
done | sort -n | sed -n 3p | sed 's/^/import chunkline (median of 5 by wall): /'
