"""Execute a notebook headless in a real Jupyter kernel, print what it shows, save the result.

    python -m kernel_ext.run_notebook notebooks/quickstart.ipynb [--out artifacts/] [--timeout S]

Text outputs (streams, results, errors) of every cell are printed as the cell finishes; the executed
notebook is written to ``--out`` (default ``artifacts/``) as JupyterLab saves it with terra-nb's
server extension: terra-nb's views as their pictures (PNG and SVG, shown by every front end once
the kernel is gone; ``terra_nb/views/saved.py``), other widgets with their state. The exit status
is 1 when a cell fails.

Each line a cell writes is printed once: the kernel copies everything written to its standard
streams (also by C++ code, such as TensorFlow's log) both into the cell's outputs and onto its
own terminal, so that terminal goes to ``--out``/NAME.kernel.log instead of ours. The kernel
starts with TensorFlow's C++ log off (``TF_CPP_MIN_LOG_LEVEL=3``) unless the environment sets a
level: a notebook's own setting comes too late when TensorFlow was imported before its first cell.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from terra_nb.views.saved import keep_pictures


def output_text(output: dict) -> str:
    """The text a person would read in one cell output."""
    kind = output.get("output_type")
    if kind == "stream":
        return output.get("text", "")
    if kind in ("execute_result", "display_data"):
        data = output.get("data", {})
        return data.get("text/plain", "") + "\n" if "text/plain" in data else ""
    if kind == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    return ""


def kernel_env() -> dict[str, str]:
    """The kernel's environment: ours, with TensorFlow's C++ log off unless we set a level."""
    return {"TF_CPP_MIN_LOG_LEVEL": "3", **os.environ}


def run(path: Path, out_dir: Path, timeout: int) -> int:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={
        "metadata": {"path": str(path.parent)}})
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / f"{path.stem}.kernel.log"
    with open(log_path, "wb") as log, client.setup_kernel(
        env=kernel_env(), stdout=log, stderr=log
    ):
        status = _execute(client, nb)
        client.set_widgets_metadata()  # execute() does this; running cell by cell, we must
    keep_pictures(nb)
    if status:
        print(f"the kernel's own output: {log_path}", file=sys.stderr)
    target = out_dir / path.name
    nbformat.write(nb, target)
    print(f"executed notebook saved to {target}")
    return status


def _execute(client: NotebookClient, nb) -> int:
    """Run the code cells in order, printing each one's text; 1 at the first failing cell."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            client.execute_cell(cell, index)
        except CellExecutionError as error:
            print(f"[cell {index}] failed:\n{error}", file=sys.stderr)
            return 1
        finally:
            text = "".join(output_text(o) for o in cell.get("outputs", []))
            if text.strip():
                print(f"--- [cell {index}]\n{text.rstrip()}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, default=Path("artifacts"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    if not args.notebook.exists():
        parser.error(f"no notebook at {args.notebook}")
    return run(args.notebook, args.out, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
