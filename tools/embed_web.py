#!/usr/bin/env python3
"""embed_web.py - build the dashboard's one self-contained page as a C source.

    embed_web.py --output OUT.c --html web/index.html --app web/app.js \
                 --style web/style.css --uplot-js uPlot.iife.min.js \
                 --uplot-css uPlot.min.css --uplot-license LICENSE \
                 --uplot-package package.json

web/index.html names its assets the way a browser would fetch them:

    <link rel="stylesheet" href="uPlot.min.css">
    <link rel="stylesheet" href="style.css">
    <script src="uPlot.iife.min.js"></script>
    <script src="app.js"></script>

Each of those four lines (exactly so, each once) is replaced by the file's
text inside a <style> or <script> element, uPlot's script preceded by its MIT
license as a comment. So the page the controller serves at / is one response
(no further round trip before the first paint), and web/index.html stays a
plain page that can be read and edited without this script.

Writes OUT.c defining what src/server/web.h declares: the page as a byte array
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

HINT = "run scripts/setup.sh, which runs npm ci"
BYTES_PER_LINE = 16

CSP = ("default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; "
       "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def fail(msg):
    sys.stderr.write("embed_web.py: %s\n" % msg)
    sys.exit(1)


def read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail("%s: %s (%s)" % (path, e.strerror, HINT))
    if not data:
        fail("%s: empty file" % path)
    return data


def check_absent(path, data, patterns):
    for pat in patterns:
        if re.search(pat, data, re.IGNORECASE):
            fail("%s: contains %r, which cannot be inlined in an HTML page"
                 % (path, pat.decode()))


def c_bytes(name, data):
    lines = ["const unsigned char %s[] = {" % name]
    for i in range(0, len(data), BYTES_PER_LINE):
        chunk = data[i:i + BYTES_PER_LINE]
        lines.append("    " + ", ".join("0x%02x" % b for b in chunk) + ",")
    lines.append("};")
    lines.append("const size_t %s_len = %d;" % (name, len(data)))
    return "\n".join(lines) + "\n"


def sha256_source(text):
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(text).digest()).decode("ascii")


def replace_once(page, marker, element, path):
    if page.count(marker) != 1:
        fail("%s: expected the line %r exactly once" % (path, marker.decode()))
    return page.replace(marker, element)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("output", "html", "app", "style", "uplot-js", "uplot-css", "uplot-license",
                 "uplot-package"):
        ap.add_argument("--" + name, required=True)
    args = ap.parse_args()

    page = read(args.html)
    app = read(args.app)
    style = read(args.style)
    ujs = read(args.uplot_js)
    ucss = read(args.uplot_css)
    lic = read(args.uplot_license)
    try:
        pkg = json.loads(read(args.uplot_package))
    except ValueError as e:
        fail("%s: not JSON: %s" % (args.uplot_package, e))
    if not isinstance(pkg, dict) or pkg.get("name") != "uplot":
        fail("%s: not uPlot's package.json" % args.uplot_package)
    version = str(pkg.get("version", ""))
    if not re.fullmatch(r"[0-9A-Za-z.+-]{1,40}", version):
        fail("%s: odd version %r" % (args.uplot_package, version))
    if b"MIT" not in lic or b"*/" in lic:
        fail("%s: expected uPlot's MIT license" % args.uplot_license)
    for path, data in ((args.app, app), (args.uplot_js, ujs)):
        check_absent(path, data, [rb"</script", rb"<!--"])
    for path, data in ((args.style, style), (args.uplot_css, ucss)):
        check_absent(path, data, [rb"</style"])

    # uPlot's license travels with its code, as the MIT license asks.
    ujs = (b"/*! uPlot " + version.encode() + b" (https://github.com/leeoniya/uPlot)\n" +
           lic.rstrip(b"\n") + b"\n*/\n" + ujs)
    scripts = [ujs, app]
    styles = [ucss, style]
    page = replace_once(page, b'<link rel="stylesheet" href="uPlot.min.css">',
                        b"<style>" + ucss + b"</style>", args.html)
    page = replace_once(page, b'<link rel="stylesheet" href="style.css">',
                        b"<style>" + style + b"</style>", args.html)
    page = replace_once(page, b'<script src="uPlot.iife.min.js"></script>',
                        b"<script>" + ujs + b"</script>", args.html)
    page = replace_once(page, b'<script src="app.js"></script>',
                        b"<script>" + app + b"</script>", args.html)
    if re.search(rb"<script[^>]*\bsrc=|<link[^>]*\bstylesheet", page):
        fail("%s: an asset that is not inlined would be blocked by the CSP" % args.html)

    csp = CSP.format(scripts=" ".join(sha256_source(s) for s in scripts),
                     styles=" ".join(sha256_source(s) for s in styles))
    etag = '"%s"' % hashlib.sha256(page).hexdigest()[:32]

    out = [
        "/* Generated by tools/embed_web.py from web/ and node_modules/uplot (uPlot %s):"
        " do not edit. */\n" % version,
        "#include <stddef.h>\n",
        '#include "server/web.h"\n',
        '#include "util/banned.h"\n',
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
