/*
 * version.h - the binary's version, written at build time from `git
 * describe` (meson's vcs_tag), or the project's version outside a tagged
 * git tree.
 */
#ifndef GPUORCH_VERSION_H
#define GPUORCH_VERSION_H

extern const char gpuorch_version[];

#endif
