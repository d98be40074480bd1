"""A run's figures (benchbench.report.plots) as inline SVG: deterministic bytes, ids unique on the page, a title for screen readers."""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass
from xml.etree import ElementTree

from markupsafe import Markup

from benchbench.errors import BenchError

SVG_NS = "http://www.w3.org/2000/svg"
ElementTree.register_namespace("", SVG_NS)
ElementTree.register_namespace("xlink", "http://www.w3.org/1999/xlink")
TITLES = {"accuracy-vs-compute": "Accuracy against pre-training compute",
          "data-scaling": "Accuracy against training-set size"}


@dataclass(frozen=True)
class Figure:
    kind: str
    title: str
    svg: Markup  # the <svg> element, ready to inline


def figures(df, styles, salt: str) -> tuple[list[Figure], dict[str, str]]:
    """Every figure benchbench.report.plots can draw of the run, and {kind: why not} for the others."""
    from benchbench.report import plots
    drawn, skipped = [], {}
    for kind in plots.KINDS:
        draw = plots.accuracy_vs_compute if kind == "accuracy-vs-compute" else plots.data_scaling
        try:
            fig = draw(df, "", styles)
        except BenchError as exc:
            skipped[kind] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - records this code did not foresee: say so, draw the rest
            skipped[kind] = f"could not be drawn ({type(exc).__name__}: {exc})"
            print(f"warning: figure {kind}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        drawn.append(Figure(kind, TITLES.get(kind, kind), svg_markup(fig, f"{salt}:{kind}", TITLES.get(kind, kind))))
    return drawn, skipped


def svg_markup(fig, salt: str, title: str) -> Markup:
    """The figure as an inline <svg>: no date in it, ids hashed with and prefixed by `salt` (so two
    figures on one page never share an id, and a rebuild gives the same bytes), text kept as text."""
    import matplotlib
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    # Give the figure a role and an accessible name: a <title> first child, as SVG wants it.
    root = ElementTree.fromstring(buf.getvalue())
    for meta in root.findall(f"{{{SVG_NS}}}metadata"):  # RDF about the file (format, creator): not for a page
        root.remove(meta)
    _prefix_ids(root, re.sub(r"[^A-Za-z0-9_-]+", "-", salt) + "-")
    # Scale with the page, up to 1.4 times its drawn size (a figure's size is in points).
    width = float(re.match(r"[\d.]+", root.get("width", "432")).group(0))
    root.set("width", "100%")
    root.attrib.pop("height", None)
    root.set("style", f"max-width: {width * 1.4:.0f}pt")
    root.set("role", "img")
    root.set("aria-label", title)
    name = ElementTree.Element(f"{{{SVG_NS}}}title")
    name.text = title
    root.insert(0, name)
    return Markup(ElementTree.tostring(root, encoding="unicode"))


def _prefix_ids(root: ElementTree.Element, prefix: str) -> None:
    """Prefix every id of the SVG, and every reference to one (`href="#id"`, `url(#id)`)."""
    ids = {el.get("id") for el in root.iter() if el.get("id")}
    ref = re.compile(r"#([^\s)\"']+)")
    for el in root.iter():
        for name, value in list(el.attrib.items()):
            if name == "id":
                el.set(name, prefix + value)
            elif "#" in value:
                el.set(name, ref.sub(lambda m: "#" + prefix + m[1] if m[1] in ids else m[0], value))
