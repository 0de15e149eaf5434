"""The run report as one self-contained HTML page: styles inline, charts as inline SVG, no
script, and a Content-Security-Policy that lets the page load nothing at all, so a hostile
document's text (shown escaped) could not fetch anything even if it slipped through.

Numbers the tests read carry data attributes: ``data-funnel="kept"`` on each funnel total,
``data-format`` / ``data-count`` on the per-format cells.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from chunkline.pipeline.report.gather import ReportData, Sample, SampleChunk, clip, counted
from chunkline.pipeline.report.svg import BAR_COLOUR, OUTCOME_COLOURS, escape, histogram_svg, stacked_bars

OUTCOMES = ("kept", "duplicate", "rejected")

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 16px 24px; color: #1d1d1f; }
h1 { font-size: 20px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
dl.totals { display: flex; gap: 24px; margin: 8px 0; } dl.totals div { text-align: center; }
dl.totals dt { color: #555; } dl.totals dd { margin: 0; font-size: 22px; font-weight: 600; }
.chart text { font: 11px system-ui, sans-serif; fill: #333; }
.warn { background: #fff3e0; border-left: 4px solid #ef6c00; padding: 6px 10px; }
.note { color: #555; } code, .mono { font-family: ui-monospace, monospace; font-size: 12px; overflow-wrap: anywhere; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
pre.doc { white-space: pre-wrap; overflow-wrap: anywhere; font: 12px/1.6 ui-monospace, monospace; border: 1px solid #ddd; padding: 8px; max-height: 480px; overflow: auto; }
.seg.c0 { background: #e3f2fd; } .seg.c1 { background: #f1f8e9; } .seg.overlap { background: #ffe0b2; } .seg.gap { background: none; color: #999; }
.seg.start::before { content: attr(data-label); display: block; font: 600 11px system-ui, sans-serif; color: #fff; background: #3b6ea5; padding: 1px 6px; margin-top: 4px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def segments(length: int, chunks: Sequence[SampleChunk]) -> list[tuple[int, int, tuple[int, ...]]]:
    """``[0, length)`` cut at every chunk start and end inside it, as (start, end, positions in
    ``chunks`` of the chunks covering it); the pieces cover ``[0, length)`` exactly once, in
    order (a gap has no chunk, an overlap several).

    >>> segments(10, [SampleChunk(0, 0, 4, 1, ()), SampleChunk(1, 3, 8, 1, ())])
    [(0, 3, (0,)), (3, 4, (0, 1)), (4, 8, (1,)), (8, 10, ())]
    """
    cuts = {0, length}
    for chunk in chunks:
        cuts.update(c for c in (chunk.start, chunk.end) if 0 < c < length)
    edges = sorted(cuts)
    out = []
    for start, end in zip(edges, edges[1:]):
        covering = tuple(i for i, c in enumerate(chunks) if c.start <= start and end <= c.end)
        out.append((start, end, covering))
    return out


def _heading_path(headings: Iterable[str]) -> str:
    return " › ".join(clip(h, 80) for h in headings) or "(no heading)"


def sample_html(sample: Sample) -> str:
    """The sample's text as spans, one per :func:`segments` piece: a chunk's first piece is
    labelled (index and heading path, shown by CSS from ``data-label``, so the spans' text is
    exactly the document's text)."""
    chunks = sample.chunks
    starts = {c.start: i for i, c in reversed(list(enumerate(chunks)))}
    parts = []
    for start, end, covering in segments(len(sample.text), chunks):
        if not covering:
            kind = "gap"
        elif len(covering) > 1:
            kind = "overlap"
        else:
            kind = f"c{chunks[covering[0]].index % 2}"
        attrs = f' data-start="{start}" data-chunks="{" ".join(str(chunks[i].index) for i in covering)}"'
        first = starts.get(start)
        if first is not None:
            chunk = chunks[first]
            label = f"#{chunk.index} · {counted(chunk.tokens, 'token')} · {_heading_path(chunk.headings)}"
            kind += " start"
            attrs += f' data-label="{escape(label)}"'
        parts.append(f'<span class="seg {kind}"{attrs}>{escape(sample.text[start:end])}</span>')
    return "".join(parts)


def _totals(data: ReportData) -> str:
    counts = data.counts
    items = [("read", counts.get("read", counts.get("documents", 0)))] + [
        (name, counts.get(name, 0)) for name in OUTCOMES] + [("chunks", counts.get("chunks", 0))]
    return '<dl class="totals">' + "".join(
        f'<div><dt>{name}</dt><dd data-funnel="{name}">{value:,}</dd></div>' for name, value in items
    ) + "</dl>"


def _funnel(data: ReportData) -> str:
    rows = "".join(
        f'<tr data-format="{escape(row.format)}"><td>{escape(row.format)}</td>'
        f'<td class="n" data-count="read">{row.read:,}</td>'
        + "".join(f'<td class="n" data-count="{name}">{getattr(row, name):,}</td>' for name in OUTCOMES)
        + "</tr>" for row in data.formats)
    head = "".join(f'<th class="n"><span class="swatch" style="background:{OUTCOME_COLOURS[n]}"></span>{n}</th>'
                   for n in OUTCOMES)
    chart = stacked_bars("chart-funnel", "documents by format",
                         [(row.format, {n: getattr(row, n) for n in OUTCOMES}) for row in data.formats],
                         OUTCOME_COLOURS)
    return (f'<section id="funnel"><h2>Documents</h2>{_totals(data)}'
            f'<table><tr><th>format</th><th class="n">read</th>{head}</tr>{rows}</table>{chart}</section>')


def _rejected(data: ReportData) -> str:
    if not data.reasons:
        return '<section id="rejected"><h2>Rejected</h2><p class="note">No document rejected.</p></section>'
    rows = "".join(
        f'<tr><td>{escape(r.kind)}</td><td class="n" data-reason-count>{r.count:,}</td><td>'
        + "<br>".join(f'<code>{escape(src)}</code>: {escape(reason)}' for src, reason in r.examples)
        + "</td></tr>" for r in data.reasons)
    more = (f'<p class="note">{counted(data.reason_kinds - len(data.reasons), "more kind")} not shown.</p>'
            if data.reason_kinds > len(data.reasons) else "")
    return (f'<section id="rejected"><h2>Rejected</h2><table><tr><th>reason</th><th class="n">documents</th>'
            f'<th>examples (source: reason)</th></tr>{rows}</table>{more}</section>')


def _duplicates(data: ReportData) -> str:
    if not data.clusters:
        return '<section id="duplicates"><h2>Duplicate clusters</h2><p class="note">No duplicate.</p></section>'
    rows = []
    for cluster in data.clusters:
        members = "<br>".join(
            f'<code>{escape(m.uri)}</code> '
            + ("exact copy" if m.exact else
               f"similarity {m.similarity:.2f}" if m.similarity is not None else "similarity n/a")
            for m in cluster.members)
        if cluster.size > len(cluster.members):
            members += f'<br><span class="note">and {cluster.size - len(cluster.members):,} more</span>'
        rows.append(f'<tr><td><code>{escape(cluster.survivor_uri or cluster.survivor)}</code></td>'
                    f'<td class="n">{cluster.size:,}</td><td>{members}</td></tr>')
    more = (f'<p class="note">{counted(data.cluster_count - len(data.clusters), "smaller cluster")} not shown.</p>'
            if data.cluster_count > len(data.clusters) else "")
    return (f'<section id="duplicates"><h2>Duplicate clusters</h2><p class="note">{escape(data.similarity_note)}</p>'
            f'<table><tr><th>survivor (kept)</th><th class="n">duplicates</th><th>members</th></tr>'
            f'{"".join(rows)}</table>{more}</section>')


def _boilerplate(data: ReportData) -> str:
    found = data.manifest.boilerplate
    head = '<section id="boilerplate"><h2>Boilerplate removed</h2>'
    if not found:
        return head + '<p class="note">Boilerplate removal was off, or this run did not record it.</p></section>'
    lines = found.get("top_removed") or []
    summary = (f'<p>{counted(int(found.get("documents_changed", 0)), "document")} changed, '
               f'{counted(int(found.get("chars_removed", 0)), "character")} removed, '
               + counted(int(found.get("frequent_keys", 0)), "frequent line or block",
                         "frequent lines and blocks") + ".</p>")
    if not lines:
        return head + summary + "</section>"
    rows = "".join(f'<tr><td class="n">{int(r.get("documents", 0)):,}</td>'
                   f'<td><pre class="mono">{escape(clip(str(r.get("text", ""))))}</pre></td></tr>' for r in lines[:50])
    return (head + summary + '<table><tr><th class="n">documents</th><th>line or block (first seen)</th></tr>'
            + rows + "</table></section>")


def _chunks(data: ReportData) -> str:
    hist = data.histogram
    over = sum(c for i, c in enumerate(hist.counts) if hist.budget is not None and hist.edges[i] > hist.budget)
    budget = f"budget {counted(hist.budget, 'token')}" if hist.budget is not None else "no budget recorded"
    return (f'<section id="chunks"><h2>Chunk sizes</h2><p>{counted(hist.chunks, "chunk")}, largest '
            f'{counted(hist.largest, "token")}, {budget}; {over:,} over it.</p>'
            f'{histogram_svg("chart-tokens", hist)}</section>')


def _vectors(data: ReportData) -> str:
    counts, model, parts = data.counts, data.manifest.model, []
    if model is not None:
        parts.append(f'<p>Model <code>{escape(str(model.name))}</code>, {model.dim}-d, '
                     f'stored as {escape(str(model.vector_dtype))}.</p>')
        if "embedded" in counts:
            previous = data.manifest.previous
            parts.append(stacked_bars("chart-vectors", "vectors", [
                ("vectors", {"embedded": counts["embedded"], "reused": counts["reused"]})],
                {"embedded": BAR_COLOUR, "reused": OUTCOME_COLOURS["kept"]}))
            parts.append(f'<p><span data-vectors="embedded">{counts["embedded"]:,}</span> embedded, '
                         f'<span data-vectors="reused">{counts["reused"]:,}</span> reused'
                         + (f' from <code>{escape(str(previous))}</code>' if previous else "")
                         + f'; {_failed_check(counts.get("reuse_rejected", 0))}.'
                         + (f' The model read {counted(counts["tokens_embedded"], "token")} in '
                            f'{counted(counts.get("tokens_padded", 0), "padded position")}.'
                            if counts.get("tokens_embedded") else "")
                         + "</p>")
    else:
        parts.append('<p class="note">Embedding was off.</p>')
    context = data.manifest.context
    if context:
        rows = "".join(f'<tr><td>{escape(str(k))}</td><td class="n">{int(v):,}</td></tr>'
                       for k, v in (context.get("counters") or {}).items())
        parts.append(f'<h3>Context headers</h3><p>Estimated cost <b data-context="cost">'
                     f'${float(context.get("estimated_cost_usd") or 0):,.4f}</b></p><table>{rows}</table>')
    else:
        parts.append('<p class="note">Context headers were off.</p>')
    return f'<section id="vectors"><h2>Vectors and context</h2>{"".join(parts)}</section>'


def _failed_check(count: int) -> str:
    return ("1 stored vector failed its check" if count == 1
            else f"{count:,} stored vectors failed their check")


def _timing(data: ReportData) -> str:
    wall = data.manifest.wall_seconds
    stages = data.manifest.stage_seconds
    head = '<section id="timing"><h2>Time</h2>'
    text = f"<p>Wall time {wall:,.1f} s.</p>" if isinstance(wall, (int, float)) else \
        '<p class="note">This run did not record its wall time.</p>'
    if not stages:
        return head + text + ('<p class="note">Time per stage not available: the runner did not '
                              'report per-transform execution time.</p></section>')
    rows = [(name, {"seconds": round(float(sec), 2)}) for name, sec in stages.items()][:30]
    chart = stacked_bars("chart-stages", "seconds per stage", rows, {"seconds": BAR_COLOUR})
    return (head + text + '<p class="note">Seconds per stage: Beam\'s execution-time metric, summed over '
            'the workers (busy time, not wall time).</p>' + chart + "</section>")


def _samples(data: ReportData) -> str:
    out = ['<section id="samples"><h2>Sample documents and their chunks</h2>']
    if not data.samples:
        out.append('<p class="note">No document kept.</p>')
    for sample in data.samples:
        cut = (f' Showing the first {len(sample.text):,} of {counted(sample.length, "character")}.'
               if sample.length > len(sample.text) else "")
        shown = (f' {len(sample.chunks):,} of {counted(sample.chunk_count, "chunk")} drawn.'
                 if sample.chunk_count > len(sample.chunks) else "")
        rows = "".join(f'<tr><td class="n">{c.index}</td><td class="n">{c.start:,}–{c.end:,}</td>'
                       f'<td class="n">{c.tokens:,}</td><td>{escape(_heading_path(c.headings))}</td></tr>'
                       for c in sample.chunks)
        out.append(
            f'<article class="sample" data-sample-format="{escape(sample.format)}">'
            f'<h3>{escape(sample.format)}: <code>{escape(sample.uri)}</code></h3>'
            f'<p class="note">{counted(sample.chunk_count, "chunk")} over '
            f'{counted(sample.length, "character")}.{cut}{shown}</p>'
            f'<details><summary>chunk table</summary><table><tr><th class="n">#</th><th class="n">span</th>'
            f'<th class="n">tokens</th><th>heading path</th></tr>{rows}</table></details>'
            f'<pre class="doc" data-doc-id="{escape(sample.doc_id)}">{sample_html(sample)}</pre></article>')
    out.append("</section>")
    return "".join(out)


def render(data: ReportData) -> str:
    """The whole page."""
    m = data.manifest
    state = "reconciled" if m.reconciled else "NOT reconciled"
    if m.held_back:
        state += "; held back: " + "; ".join(m.held_back)
    warnings = "".join(f'<p class="warn">{escape(w)}</p>' for w in data.warnings)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no favicon request either
        f"<title>chunkline run {escape(data.run_id)}</title><style>{CSS}</style></head><body>"
        f'<h1>chunkline run <code>{escape(data.run_id)}</code></h1>'
        f'<p class="note">{escape(m.created_at or "")} · {escape(m.runner or "")} · '
        f'chunkline {escape(m.chunkline_version or "")} · Beam {escape(m.beam_version or "")}'
        f' · {escape(state)}</p>{warnings}'
        + _funnel(data) + _rejected(data) + _duplicates(data) + _boilerplate(data) + _chunks(data)
        + _vectors(data) + _timing(data) + _samples(data)
        + "</body></html>\n"
    )
