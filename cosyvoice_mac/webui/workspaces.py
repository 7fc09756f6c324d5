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
@media (max-width: 640px) {  /* the five names fit a phone's width, none hidden in the tabs' overflow menu */
  #cv-workspaces .tab-wrapper button { padding: 0 0.45em; font-size: 0.85em; min-width: 0; }
}
"""


def workspace(make, name: str) -> gr.Tab:
    """The tab of workspace ``name`` (use as ``with``); its children are rendered while hidden, so a result or a
    voice menu updated from another workspace is there, current, when the user comes back."""
    return make(gr.Tab, {"label": f"ws_{name}"}, id=name, elem_id=f"cv-ws-{name}", render_children=True)


def remember_js(name: str) -> str:
    """Browser code run when workspace ``name`` is chosen: the address says so (no new history entry). Not before
    the page has read the address it was opened with: Gradio selects the first tab as it draws the page, which
    would otherwise overwrite a link's #name before it is read."""
    return "() => { if (window.cvAddressRead) history.replaceState(null, '', '#" + name + "'); }"


def asked_workspace(name: str | None):
    """The workspace the address names (``#convert``) shown when the page loads; a name not ours changes nothing.
    Gradio's Tabs take their selection from the server, so this is the page's load event, not browser code
    pressing a tab button that may not be drawn yet."""
    return gr.update(selected=name) if name in WORKSPACES else gr.skip()


ADDRESS_JS = "() => { window.cvAddressRead = true; return decodeURIComponent((location.hash || '').slice(1)); }"

# Runs once when the page loads: a link to another workspace later in the same page (the address's #name
# changes without a load), and the keyboard's two keys.
WORKSPACE_KEYS_JS = (
    "() => { const names = "
    + json.dumps(list(WORKSPACES))
    + """;
  if (window.cvKeys) return;
  window.cvKeys = true;
  window.addEventListener('hashchange', () => {
    const wanted = decodeURIComponent((location.hash || '').slice(1));
    if (!names.includes(wanted)) return;
    const button = document.getElementById('cv-ws-' + wanted + '-button');
    if (button) button.click(); else location.reload();  // in the tabs' overflow menu: the load event picks it
  });
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


def wire_workspaces(page, workspaces, tabs) -> None:
    """The address follows the workspace chosen, the page opens on the one the address names, and the keys."""
    asked = gr.Textbox(visible=False)  # carries the address's #name from the browser to asked_workspace
    for name, tab in zip(WORKSPACES, tabs):
        tab.select(None, None, None, js=remember_js(name))
    page.load(asked_workspace, asked, workspaces, js=ADDRESS_JS, queue=False, show_progress="hidden")
    page.load(None, None, None, js=WORKSPACE_KEYS_JS)
