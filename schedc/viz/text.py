"""Text made safe for the formats pictures are written in: XML and HTML, DOT strings, and JSON inside
an HTML `<script>`. Every name, label and source line a picture shows goes through one of these, so
no schedule name or comment can break the file around it or inject into it.
"""
from __future__ import annotations

import re
from html import escape as _escape_html

from ..outputs import dumps_json

# what XML 1.0 forbids: C0 controls but tab, newline and carriage return; lone surrogates; U+FFFE, U+FFFF
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
REPLACEMENT = "\ufffd"  # shown instead of a character the format cannot hold


def xml_chars(text: str) -> str:
    """`text` with every character XML 1.0 forbids replaced by U+FFFD."""
    return _NOT_XML.sub(REPLACEMENT, text)


def escape(text) -> str:
    """`text` as XML or HTML text or attribute value: `& < > " '` escaped, forbidden characters replaced."""
    return _escape_html(xml_chars(str(text)), quote=True)


def dot(text) -> str:
    """`text` for a DOT string given to the graphviz package: backslashes doubled and `<...>` not
    taken as an HTML label (`graphviz.escape`), so the text is shown as is and its quotes and a final
    backslash cannot end the string; characters XML forbids replaced (dot's SVG is XML)."""
    import graphviz
    return graphviz.escape(xml_chars(str(text)))


def script_json(value) -> str:
    """`value` as JSON to inline in an HTML `<script>`: every `<` written `\\u003c`, so no `</script`,
    `<!--` or `<script` in a string can end or derail the script (JSON and JavaScript read it back
    the same)."""
    return dumps_json(value, sort_keys=True, ensure_ascii=True).replace("<", "\\u003c")
