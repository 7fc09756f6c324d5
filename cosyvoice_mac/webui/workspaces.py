"""One workspace per task: Speak, Convert, Long form, Voices and History, as the page's top-level tabs.

The workspace shown is in the address (``#convert``), so a reload keeps it and a link opens it. Each workspace
has its own action row (``cv-action-row``: its action, Stop, its status) kept in view at the bottom of the
workspace; the keyboard's Ctrl/Cmd+Enter presses the shown workspace's action (class ``cv-action``) and Esc its
Stop (``cv-stop-action``). Element ids: ``cv-ws-<name>`` for a workspace, ``cv-ws-<name>-button`` for its tab.
"""

from __future__ import annotations

import json

import gradio as gr

WORKSPACES = ("speak", "convert", "longform", "voices", "history")
DEFAULT_WORKSPACE = "speak"

WORKSPACE_CSS = """
#cv-workspaces .tab-wrapper button { font-weight: 600; }
"""


def workspace(make, name: str) -> gr.Tab:
    """The tab of workspace ``name`` (use as ``with``); its children are rendered while hidden, so a result or a
    voice menu updated from another workspace is there, current, when the user comes back."""
    return make(gr.Tab, {"label": f"ws_{name}"}, id=name, elem_id=f"cv-ws-{name}", render_children=True)


def remember_js(name: str) -> str:
    """Browser code run when workspace ``name`` is chosen: the address says so (no new history entry)."""
    return "() => { history.replaceState(null, '', '#" + name + "'); }"


# Runs once when the page loads: the workspace the address names (and names later: a link), and the keyboard's
# two keys. The tab button is pressed as a user would (Gradio's Tabs follow their own buttons), once drawn.
WORKSPACE_LOAD_JS = (
    "() => { const names = "
    + json.dumps(list(WORKSPACES))
    + """;
  const follow = () => {
    const wanted = decodeURIComponent((location.hash || '').slice(1));
    if (!names.includes(wanted)) return;
    let tries = 0;
    const press = () => { const button = document.getElementById('cv-ws-' + wanted + '-button');
      if (button) button.click(); else if (tries++ < 50) setTimeout(press, 100); };
    press();
  };
  follow();
  if (window.cvKeys) return;
  window.cvKeys = true;
  window.addEventListener('hashchange', follow);  // a link to another workspace on this page
  const shown = (selector) => [...document.querySelectorAll(selector)].find(
    (element) => element.offsetParent !== null && !element.disabled);
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      const action = shown('.cv-action');
      if (action) { event.preventDefault(); action.click(); }
    } else if (event.key === 'Escape') {
      const stop = shown('.cv-stop-action');
      if (stop) stop.click();
    }
  });
}"""
)
