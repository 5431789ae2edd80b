/*
 * assets.h - uPlot, inlined into the simulator's HTML report: its minified
 * script, its stylesheet and its license notice, as they are in
 * node_modules/uplot (the version package-lock.json pins).
 *
 * The definitions are generated at build time by tools/embed_assets.py
 * (meson.build, custom_target 'sim_assets'), never written by hand. The
 * arrays are bytes, not C strings: not NUL-terminated, write them with their
 * length. The script contains neither "</script" nor "<!--" and the
 * stylesheet no "</style" (the generator checks), so both can sit verbatim
 * inside their HTML elements; the license is plain text, to be HTML-escaped.
 */
#ifndef GPUORCH_SIM_ASSETS_H
#define GPUORCH_SIM_ASSETS_H

#include <stddef.h>

extern const char sim_asset_uplot_version[]; /* "1.6.32" */

extern const unsigned char sim_asset_uplot_js[]; /* dist/uPlot.iife.min.js */
extern const size_t sim_asset_uplot_js_len;

extern const unsigned char sim_asset_uplot_css[]; /* dist/uPlot.min.css */
extern const size_t sim_asset_uplot_css_len;

extern const unsigned char sim_asset_uplot_license[]; /* LICENSE (MIT) */
extern const size_t sim_asset_uplot_license_len;

#endif
