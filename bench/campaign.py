"""The outside-in campaign: bad inputs at every door, faults, and the security probes, against the real app.

    python bench/campaign.py [--json FILE]

Starts the app as the reliability suite does (``tests/reliability/server.py``: the preview voice, its own outputs,
cache and temporary folders, an outputs disk that can be made full) and fires ``campaign_doors``' bad inputs at
the Gradio API (``/gradio_api/call/synthesize``), ``/v1`` (JSON and multipart, long form, voices), the page's
events and uploads, and the CLI (its own checks and ``--server``). Each answer is judged clean or not
(``judge``): a refusal (4xx/5xx, a Gradio error event, a page message starting with the warning sign, a CLI
exit code of 1, 2, 73 or 75) with words that name what is wrong, no traceback or Python exception name, no
absolute path of the server's folders, nothing new in outputs/, and the app still answering. Then the faults
(a worker killed or stopped mid-job, outputs full or read-only, damaged voice list and glossary, a client that
leaves, a flood, a constant prompt) and the security probes (cross-origin changes, a rebinding Host, file
reads outside outputs/ and the temp folder). Then issue 45's cases (``campaign_round3``: each escape of the third
campaign, as it was found). Prints JSON: counts per door and every unclean answer.
Not a timed test: it takes minutes. ``--only round-three`` runs issue 45's cases alone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's package and tests
sys.path.insert(0, str(REPO / "bench"))

import httpx  # noqa: E402

from tests.reliability.server import REPO_ROOT, AppServer, FullDisk  # noqa: E402

RAW = re.compile(r"Traceback|\b\w+Error\b|__round__|0x[0-9a-f]{6,}|<gradio\.|object at|File \"")
CLI_EXITS = (1, 2, 73, 75)  # cli/common.py's codes for a failed, refused, unsaved or try-later job


def server_paths(app: AppServer) -> list[str]:
    return [str(app.root), str(REPO_ROOT), sys.prefix]


def alive(app: AppServer) -> bool:
    try:
        return httpx.get(app.url + "v1/models", timeout=30).status_code == 200
    except httpx.HTTPError:
        return False


def _refused(answer) -> str | None:
    """Why ``answer`` is not a specific refusal at its door (None: it is)."""
    text = answer.text or ""
    if answer.door == "v1":
        if answer.status is None or answer.status < 400:
            return f"status {answer.status}"
        try:
            error = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            return "no JSON error"
        if not error.get("message") or not (error.get("param") or error.get("code")):
            return "the error names no field or code"
        return None
    if answer.door == "gradio_api":
        if answer.status is not None:
            return None if 400 <= answer.status < 500 and len(text) > 10 else f"status {answer.status}"
        data = text.split("event: error", 1)[1] if "event: error" in text else ""
        return None if re.search(r"data: .{12,}", data) and "data: null" not in data else "no error message"
    if answer.door == "page":
        return None if text.startswith("⚠️") and len(text) > 8 else "no warning message"
    if answer.door == "upload":
        return None if answer.status is not None and answer.status < 500 else f"status {answer.status}"
    if answer.door == "cli":
        if answer.exit_code not in CLI_EXITS:
            return f"exit {answer.exit_code}"
        return None if len(text.strip()) > 10 else "no message"
    return "unknown door"


def judge(app: AppServer, answer, before: set[str]) -> list[str]:
    """Every way ``answer`` is not clean (an empty list: clean)."""
    problems = []
    if answer.accepted:
        problems.append("taken as good")
    why = _refused(answer)
    if why:
        problems.append(why)
    if RAW.search(answer.text or ""):
        problems.append("Python internals in the answer")
    if answer.door != "cli" and any(path in (answer.text or "") for path in server_paths(app)):
        problems.append("a server path in the answer")
    made = _outputs(app) - before
    if made:
        problems.append(f"new files in outputs/: {sorted(made)[:3]}")
    return problems


def _outputs(app: AppServer) -> set[str]:
    return {path.name for path in app.outputs.glob("*") if path.is_file()} if app.outputs.is_dir() else set()


def run_doors(app: AppServer, root: Path, files: dict[str, str]) -> list[dict]:
    import campaign_doors as doors

    results = []
    client = app.client()
    with httpx.Client(base_url=app.url.rstrip("/"), trust_env=False, timeout=120) as http:
        batches = [
            lambda: doors.gradio_rest(http),
            lambda: doors.v1_speech(http),
            lambda: doors.v1_uploads(http, files),
            lambda: doors.page_events(app, client, files),
            lambda: doors.cli(app, root / "cli", files),
        ]
        (root / "cli").mkdir(exist_ok=True)
        for batch in batches:
            before = _outputs(app)
            for answer in batch():
                problems = judge(app, answer, before)
                if not alive(app):
                    problems.append("the app stopped answering")
                    app.wait_ready()
                before = _outputs(app)
                results.append(
                    {
                        "door": answer.door,
                        "case": answer.case,
                        "clean": not problems,
                        "problems": problems,
                        "said": (answer.text or "")[-300:],
                    }
                )
    return results


def summary(rows: list[dict], key: str = "door") -> dict:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        count = counts.setdefault(row[key], {"clean": 0, "total": 0})
        count["total"] += 1
        count["clean"] += bool(row["clean"])
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--only", choices=["round-three"], help="only issue 45's cases (bench/campaign_round3.py)")
    parser.add_argument("--no-exposed", action="store_true", help="no second, key-locked server (issue 45 item 2)")
    args = parser.parse_args(argv)
    import campaign_faults as faults
    import campaign_round3 as round3

    from tests.reliability.bad_files import make_speech, write_bad_files

    with tempfile.TemporaryDirectory(prefix="cosyvoice-campaign-") as folder:
        root = Path(folder)
        disk = FullDisk.prepare(root / "app" / "outputs", root / "app" / "disk-is-full")
        disk_kind = disk.kind
        app = AppServer(root / "app")
        try:
            app = faults.start_on_a_free_port(app, disk)
            speech = make_speech(root / "speech.wav", "This is the voice I would like you to copy, please.", 4.0)
            files = write_bad_files(root / "bad", str(speech))
            started = time.monotonic()
            everything = args.only is None
            inputs = run_doors(app, root, files) if everything else []
            print(f"bad inputs: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
            security = faults.security(app, root) if everything else {}
            fault_rows = faults.run_faults(app, disk, root, files) if everything and not args.skip_faults else []
            round_three = round3.run_round_three(app, disk, root, files, exposed=not args.no_exposed)
            print(f"all: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            app.stop()
            disk.release()
    figures = {
        "outputs_disk": disk_kind,
        "seconds": round(time.monotonic() - started),
        "bad_inputs": {
            "clean": sum(row["clean"] for row in inputs),
            "total": len(inputs),
            "per_door": summary(inputs),
            "unclean": [row for row in inputs if not row["clean"]],
        },
        "faults": {
            "clean": sum(bool(row["clean"]) for row in fault_rows),
            "total": sum(row["clean"] is not None for row in fault_rows),
            "not_run": [row["fault"] for row in fault_rows if row["clean"] is None],
            "rows": fault_rows,
        },
        "security": security,
        "round_three": {
            "clean": sum(bool(row["clean"]) for row in round_three),
            "total": sum(row["clean"] is not None for row in round_three),
            "not_run": [row["case"] for row in round_three if row["clean"] is None],
            "rows": round_three,
        },
    }
    text = json.dumps(figures, indent=1, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
