"""A progress bar for ``paper.main(report=ProgressBar())`` in a notebook: one display updated in
place (an HTML ``<progress>`` bar with the latest line; plain text where HTML is not shown),
instead of a block of stderr lines."""

from __future__ import annotations

from html import escape


class ProgressBar:
    """``report(text, finished)`` for ``paper.main``; ``start(steps)`` sets the bar's length."""

    def __init__(self) -> None:
        from IPython.display import display

        self.steps, self.done, self.text = 1, 0, "starting"
        self._handle = display(self._bundle(), raw=True, display_id=True)

    def start(self, steps: int) -> None:
        self.steps, self.done = max(steps, 1), 0
        self._show()

    def __call__(self, text: str, finished: bool = False) -> None:
        self.done += finished
        self.text = text
        self._show()

    def _show(self) -> None:
        self._handle.update(self._bundle(), raw=True)

    def _bundle(self) -> dict[str, str]:
        done = min(self.done, self.steps)
        width = 30
        filled = round(width * done / self.steps)
        plain = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{self.steps}  {self.text}"
        html = (f'<progress value="{done}" max="{self.steps}" style="width: 24em"></progress> '
                f"<code>{done}/{self.steps}</code> {escape(self.text)}")
        return {"text/plain": plain, "text/html": html}
