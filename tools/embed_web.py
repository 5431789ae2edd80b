#!/usr/bin/env python3
"""embed_web.py - build the dashboard's one self-contained page as a C source.

    embed_web.py --output OUT.c --html web/index.html --uplot-js uPlot.iife.min.js \
                 --uplot-css uPlot.min.css --uplot-license LICENSE \
                 --uplot-package package.json [ASSET ...]

web/index.html names its assets the way a browser would fetch them, one a line:

    <link rel="stylesheet" href="uPlot.min.css">
    <link rel="stylesheet" href="css/style.css">
    <script src="uPlot.iife.min.js"></script>
    <script src="js/core.js"></script>

Each such line is replaced by the file's text inside a <style> or <script>
element: uPlot's two from --uplot-js and --uplot-css (its script preceded by
its MIT license as a comment), every other one from the path it names,
relative to the page's folder. Each ASSET given must be named by the page
exactly once, and the page may name nothing else (so meson, which passes them,
rebuilds when any changes). So the page the controller serves is one response
(no further round trip before the first paint), and web/ stays plain files
that can be read and edited without this script.

Writes OUT.c defining what src/server/api/web.h declares: the page as a byte array
and its length, the Content-Security-Policy header value (every inline script
and style is allowed by its SHA-256 hash, nothing else inline: no
'unsafe-inline'), and an ETag (a hash of the page). The output depends only on
the inputs' bytes: no timestamp, no absolute path. Meson runs this at build
time (meson.build, custom_target 'web_assets').
"""

import argparse
import base64
import hashlib
import json
import os
import re
import sys

# The simulator's embedder reads, checks and writes C arrays the same way.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from embed_assets import c_bytes, check_absent, fail, read, uplot_version  # noqa: E402

CSP = ("default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def sha256_source(text):
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(text).digest()).decode("ascii")


ASSET_RE = re.compile(rb'^[ \t]*(<link rel="stylesheet" href="([^"]+)">|<script src="([^"]+)"></script>)[ \t]*$',
                      re.M)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("output", "html", "uplot-js", "uplot-css", "uplot-license", "uplot-package"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("assets", nargs="*", help="the page's own scripts and stylesheets")
    args = ap.parse_args()

    page = read(args.html)
    base = os.path.dirname(os.path.abspath(args.html))
    given = {os.path.normpath(os.path.abspath(p)) for p in args.assets}
    ujs = read(args.uplot_js)
    ucss = read(args.uplot_css)
    lic = read(args.uplot_license)
    version = uplot_version(args.uplot_package)
    if b"MIT" not in lic or b"*/" in lic:
        fail("%s: expected uPlot's MIT license" % args.uplot_license)
    # uPlot's license travels with its code, as the MIT license asks.
    ujs = (b"/*! uPlot " + version.encode() + b" (https://github.com/leeoniya/uPlot)\n" +
           lic.rstrip(b"\n") + b"\n*/\n" + ujs)

    scripts, styles, seen = [], [], set()

    def inline(m):
        href, src = m.group(2), m.group(3)
        name = (href or src).decode()
        if name in seen:
            fail("%s: %s is named twice" % (args.html, name))
        seen.add(name)
        if name == "uPlot.min.css":
            data, path = ucss, args.uplot_css
        elif name == "uPlot.iife.min.js":
            data, path = ujs, args.uplot_js
        else:
            path = os.path.normpath(os.path.join(base, name))
            if path not in given:
                fail("%s: %s is not among the assets given (meson.build's web_assets)" % (args.html, name))
            given.discard(path)
            data = read(path)
        if href:
            check_absent(path, data, [rb"</style"])
            styles.append(data)
            return b"<style>" + data + b"</style>"
        check_absent(path, data, [rb"</script", rb"<!--"])
        scripts.append(data)
        return b"<script>" + data + b"</script>"

    page = ASSET_RE.sub(inline, page)
    for name in ("uPlot.min.css", "uPlot.iife.min.js"):
        if name not in seen:
            fail("%s: expected the line naming %s" % (args.html, name))
    if given:
        fail("%s: does not name %s" % (args.html, ", ".join(sorted(given))))
    if re.search(rb"<script[^>]*\bsrc=|<link[^>]*\bstylesheet", page):
        fail("%s: an asset that is not inlined would be blocked by the CSP" % args.html)

    csp = CSP.format(scripts=" ".join(sha256_source(s) for s in scripts),
                     styles=" ".join(sha256_source(s) for s in styles))
    etag = '"%s"' % hashlib.sha256(page).hexdigest()[:32]

    out = [
        "/* Generated by tools/embed_web.py from web/ and node_modules/uplot (uPlot %s):"
        " do not edit. */\n" % version,
        "#include <stddef.h>\n",
        '#include "server/api/web.h"\n',
        '#include "base/banned.h"\n',
        "const char web_page_csp[] = %s;\n" % json.dumps(csp),
        "const char web_page_etag[] = %s;\n" % json.dumps(etag),
        c_bytes("web_page_html", page),
    ]
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="ascii", newline="\n") as f:
        f.write("\n".join(out))
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()
