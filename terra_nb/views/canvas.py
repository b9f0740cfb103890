"""One drawing, two outputs: the timeline pictures are drawn once against this small canvas and
come out as SVG (the widgets: hover titles, ``terra-*`` classes for the browser) or as PNG (the
static fallback a saved, untrusted notebook shows: JupyterLab never renders SVG outputs there).

Coordinates are SVG user units; the PNG is drawn at ``scale`` pixels per unit.
"""

from __future__ import annotations

import io
import uuid
from contextlib import contextmanager
from functools import lru_cache
from html import escape
from typing import Any

HATCH = "terra-hatch"  # the fill of stall spans: hatched in SVG, grey in PNG
HATCH_PNG = "#ced4da"
DEFS = (
    '<defs><pattern id="{id}" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#e9ecef"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#adb5bd" stroke-width="3"/></pattern></defs>'
)


class SvgCanvas:
    """Collects SVG elements; ``finish()`` returns the ``<svg>`` text. Its pattern's id is its
    own: a page shows many drawings (two notebooks, a dashboard and a timeline), and a
    ``url(#id)`` names the first element of that id in the whole page, maybe in a hidden tab."""

    def __init__(self, width: float, height: float, cls: str, **data: Any) -> None:
        self.width, self.height, self.cls, self.data = width, height, cls, data
        self.parts: list[str] = []
        self.dy = 0.0
        self.hatch = f"terra-hatch-{uuid.uuid4().hex[:12]}"

    def rect(self, x, y, w, h, fill, *, cls="", title="", stroke="") -> None:
        fill = f"url(#{self.hatch})" if fill == HATCH else fill
        extra = f' stroke="{stroke}"' if stroke else ""
        self.parts.append(
            f'<rect{_cls(cls)} x="{x:.1f}" y="{y + self.dy:.1f}" width="{w:.1f}" '
            f'height="{h:.1f}" fill="{fill}"{extra}>{_title(title)}</rect>'
        )

    def line(self, x1, y1, x2, y2, stroke, *, width=1.0, dash=False, cls="") -> None:
        dashed = ' stroke-dasharray="2,2"' if dash else ""
        self.parts.append(
            f'<line{_cls(cls)} x1="{x1:.1f}" x2="{x2:.1f}" y1="{y1 + self.dy:.1f}" '
            f'y2="{y2 + self.dy:.1f}" stroke="{stroke}" stroke-width="{width}"{dashed}/>'
        )

    def polygon(self, points, fill) -> None:
        text = " ".join(f"{x:.1f},{y + self.dy:.1f}" for x, y in points)
        self.parts.append(f'<polygon points="{text}" fill="{fill}"/>')

    def text(self, x, y, text, *, fill="#212529", bold=False, anchor="start", size=10) -> None:
        weight = ' font-weight="bold"' if bold else ""
        self.parts.append(
            f'<text x="{x:.1f}" y="{y + self.dy:.1f}" fill="{fill}" font-size="{size}" '
            f'text-anchor="{anchor}"{weight}>{escape(text)}</text>'
        )

    @contextmanager
    def group(self, cls: str, title: str = ""):
        self.parts.append(f'<g class="{cls}">')
        yield
        self.parts.append(f"{_title(title)}</g>")

    def finish(self) -> str:
        data = "".join(f' data-{k}="{escape(str(v))}"' for k, v in self.data.items())
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="{self.cls}" width="{self.width}" '
            f'height="{self.height:.0f}" viewBox="0 0 {self.width} {self.height:.0f}" '
            f'font-family="Helvetica,sans-serif" font-size="10"{data}>'
            + DEFS.format(id=self.hatch)
            + "".join(self.parts) + "</svg>"
        )


def _cls(cls: str) -> str:
    return f' class="{cls}"' if cls else ""


def _title(title: str) -> str:
    return f"<title>{escape(title)}</title>" if title else ""


class PngCanvas:
    """The same calls drawn with Pillow; ``finish()`` returns PNG bytes."""

    def __init__(self, width: float, height: float, scale: float = 2.0) -> None:
        from PIL import Image, ImageDraw

        self.scale, self.dy = scale, 0.0
        self.image = Image.new("RGB", (round(width * scale), round(height * scale)), "white")
        self.draw = ImageDraw.Draw(self.image)

    def _xy(self, x, y) -> tuple[float, float]:
        return x * self.scale, (y + self.dy) * self.scale

    def rect(self, x, y, w, h, fill, *, cls="", title="", stroke="") -> None:
        fill = HATCH_PNG if fill == HATCH else None if fill in ("none", "transparent") else fill
        if fill is None and not stroke:
            return
        (x0, y0), (x1, y1) = self._xy(x, y), self._xy(x + w, y + h)
        self.draw.rectangle((x0, y0, max(x1 - 1, x0), max(y1 - 1, y0)), fill=fill,
                            outline=stroke or None, width=max(1, round(self.scale)))

    def line(self, x1, y1, x2, y2, stroke, *, width=1.0, dash=False, cls="") -> None:
        self.draw.line((*self._xy(x1, y1), *self._xy(x2, y2)), fill=stroke,
                       width=max(1, round(width * self.scale * (0.5 if dash else 1))))

    def polygon(self, points, fill) -> None:
        self.draw.polygon([self._xy(x, y) for x, y in points], fill=fill)

    def text(self, x, y, text, *, fill="#212529", bold=False, anchor="start", size=10) -> None:
        font = _font(round(size * self.scale), bold)
        where = {"start": "ls", "middle": "ms", "end": "rs"}[anchor]
        self.draw.text(self._xy(x, y), text, fill=fill, font=font, anchor=where)

    @contextmanager
    def group(self, cls: str, title: str = ""):
        yield

    def finish(self) -> bytes:
        out = io.BytesIO()
        self.image.save(out, format="PNG", optimize=True)
        return out.getvalue()


@lru_cache(maxsize=8)
def _font(size: int, bold: bool):
    from PIL import ImageFont

    for name in (("DejaVuSans-Bold.ttf" if bold else "DejaVuSans.ttf"), "Arial.ttf"):
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)
