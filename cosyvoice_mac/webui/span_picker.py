"""The prompt's waveform with the part in use selected (issue 50 item 10): the whole recording drawn from its peaks,
the selection over it, moved by dragging it, resized by dragging an edge, placed by a press elsewhere on the
waveform, nudged with the arrow keys (Shift: further). Each finished move (a drag let go, the keys at rest) is
sent to the server as the event ``span`` with ``{start, end}`` in seconds; the server cuts that part
(``prompt_trim``) and answers with the span it took, which the picker draws.

The picker's value is plain data for drawing, never a path (what the browser sends back is not trusted with one):

    {"total": 40.0, "start": 14.2, "end": 26.2, "shortest": 3.0, "longest": 29.8, "peaks": [0.1, ...]}

or "" for no picker (nothing drawn, no room taken). The selection element keeps ``data-start`` and ``data-end``
for tests and for anyone debugging.
"""

from __future__ import annotations

import json

import gradio as gr

from cosyvoice_mac.sound.clearest import LONGEST_SPAN_SECONDS, SHORTEST_SPAN_SECONDS, Span

PICKER_HTML = (
    '<div class="cv-span" hidden><canvas class="cv-span-wave"></canvas>'
    '<div class="cv-span-sel" tabindex="0" role="slider" aria-valuemin="0">'
    '<span class="cv-span-edge" data-edge="start"></span><span class="cv-span-edge" data-edge="end"></span>'
    "</div></div>"
)

PICKER_CSS = """
.cv-span { position: relative; height: 72px; margin: 4px 0; cursor: pointer; touch-action: none;
  color: var(--body-text-color-subdued); border: 1px solid var(--border-color-primary); border-radius: 4px; }
.cv-span-wave { width: 100%; height: 100%; display: block; }
.cv-span-sel { position: absolute; top: 0; bottom: 0; cursor: grab; outline-offset: 2px;
  background: color-mix(in srgb, var(--color-accent) 22%, transparent);
  border-left: 2px solid var(--color-accent); border-right: 2px solid var(--color-accent); }
.cv-span-edge { position: absolute; top: 0; bottom: 0; width: 14px; cursor: ew-resize; }
.cv-span-edge[data-edge=start] { left: -8px; }
.cv-span-edge[data-edge=end] { right: -8px; }
"""

# Runs once when the picker mounts; ``element``, ``props``, ``trigger`` and ``watch`` come from gr.HTML. Listeners
# sit on ``element`` (which stays) and find the parts at each use, in case the template is drawn again.
PICKER_JS = r"""
let span = null, drag = null, pending = null;
const parts = () => ({
  box: element.querySelector('.cv-span'),
  wave: element.querySelector('.cv-span-wave'),
  sel: element.querySelector('.cv-span-sel'),
});
function read() {
  if (drag) return;  // the person's own move wins over an answer to an earlier one
  try { span = props.value ? JSON.parse(props.value) : null; } catch (error) { span = null; }
  draw();
}
function draw() {
  const {box, wave, sel} = parts();
  if (!box) return;
  box.hidden = !span;
  if (!span) return;
  const width = box.clientWidth || 600, height = box.clientHeight || 72, ratio = window.devicePixelRatio || 1;
  wave.width = width * ratio;
  wave.height = height * ratio;
  const pen = wave.getContext('2d');
  pen.setTransform(ratio, 0, 0, ratio, 0, 0);
  pen.clearRect(0, 0, width, height);
  pen.fillStyle = getComputedStyle(box).color;
  const step = width / span.peaks.length;
  span.peaks.forEach((peak, index) => {
    const tall = Math.max(1, peak * (height - 6));
    pen.fillRect(index * step, (height - tall) / 2, Math.max(1, step - 0.5), tall);
  });
  sel.style.left = (100 * span.start / span.total) + '%';
  sel.style.width = (100 * (span.end - span.start) / span.total) + '%';
  sel.dataset.start = span.start.toFixed(2);
  sel.dataset.end = span.end.toFixed(2);
  sel.setAttribute('aria-valuemax', span.total.toFixed(1));
  sel.setAttribute('aria-valuenow', span.start.toFixed(1));
  sel.setAttribute('aria-valuetext', span.start.toFixed(1) + '-' + span.end.toFixed(1) + ' s');
}
function place(start, end, how) {  // keep the span inside the recording and its length within the limits
  if (how === 'move') {
    const length = end - start;
    start = Math.min(Math.max(0, start), span.total - length);
    end = start + length;
  } else if (how === 'start') {
    start = Math.min(Math.max(0, start, end - span.longest), end - span.shortest);
  } else {
    end = Math.max(Math.min(span.total, end, start + span.longest), start + span.shortest);
  }
  span.start = Math.max(0, start);
  span.end = Math.min(span.total, end);
  draw();
}
function seconds(event, rect) { return (event.clientX - rect.left) / rect.width * span.total; }
function send() { trigger('span', {start: span.start, end: span.end}); }
element.addEventListener('pointerdown', event => {
  const {box, sel} = parts();
  if (!span || !box || !box.contains(event.target)) return;
  const rect = box.getBoundingClientRect(), at = seconds(event, rect);
  let how = event.target.dataset.edge || (sel.contains(event.target) ? 'move' : null);
  if (!how) {  // a press beside the selection centres it there, then drags it from there
    const length = span.end - span.start;
    place(at - length / 2, at + length / 2, 'move');
    how = 'move';
  }
  drag = {how, from: at, start: span.start, end: span.end, rect};
  box.setPointerCapture(event.pointerId);
  event.preventDefault();
});
element.addEventListener('pointermove', event => {
  if (!drag) return;
  const shift = seconds(event, drag.rect) - drag.from;
  if (drag.how === 'move') place(drag.start + shift, drag.end + shift, 'move');
  else if (drag.how === 'start') place(drag.start + shift, drag.end, 'start');
  else place(drag.start, drag.end + shift, 'end');
});
function release() { if (drag) { drag = null; send(); } }
element.addEventListener('pointerup', release);
element.addEventListener('pointercancel', release);
element.addEventListener('keydown', event => {
  if (!span || !event.target.classList.contains('cv-span-sel')) return;
  const step = event.shiftKey ? 2 : 0.5;
  if (event.key === 'ArrowLeft') place(span.start - step, span.end - step, 'move');
  else if (event.key === 'ArrowRight') place(span.start + step, span.end + step, 'move');
  else return;
  event.preventDefault();
  event.stopPropagation();
});
element.addEventListener('keyup', event => {  // one request once the keys rest: answers never cross
  if (!span || !event.target.classList.contains('cv-span-sel') || !event.key.startsWith('Arrow')) return;
  clearTimeout(pending);
  pending = setTimeout(send, 400);
});
window.addEventListener('resize', draw);
watch('value', read);
read();
"""


def picker_value(span: Span, peaks: list[float]) -> str:
    """The picker's value for the whole recording's ``peaks`` with ``span`` selected."""
    shape = {"total": round(span.total, 3), "start": span.start, "end": span.end}
    limits = {"shortest": SHORTEST_SPAN_SECONDS, "longest": LONGEST_SPAN_SECONDS}
    return json.dumps({**shape, **limits, "peaks": peaks}, separators=(",", ":"))


def build_span_picker() -> gr.HTML:
    """The picker, drawn only while it has a value; ``.span(...)`` wires what a finished move does."""
    return gr.HTML(
        "",
        html_template=PICKER_HTML,
        css_template=PICKER_CSS,
        js_on_load=PICKER_JS,
        elem_id="cv-span-picker",
    )
