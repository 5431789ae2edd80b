# cgroups.sh - sourced by bench scripts that run agents as root.
# Where cgroup v2 is writable (as root), the agents' cgroups go under a
# directory of this run's own, removed at the end (an agent leaves its
# CGROUP_ROOT behind; the default would be the mount's gpuorch/NODE).
cgbase=''
cg_setup() {
  local mount
  mount=$(awk '$9 == "cgroup2" {print $5; exit}' /proc/self/mountinfo)
  [ "$(id -u)" = 0 ] && [ -n "$mount" ] || return 0
  cgbase=$mount/gpuorch-bench-$$
  mkdir "$cgbase" 2>/dev/null || cgbase=''
}
cgflags=()
cg_root() { # cg_root NAME: cgflags=(--cgroup-root DIR) for agent NAME, or ()
  cgflags=()
  [ -n "$cgbase" ] || return 0
  if mkdir -p "$cgbase/$1"; then cgflags=(--cgroup-root "$cgbase/$1"); fi
}
cg_remove() { # after the agents have stopped and their jobs ended
  [ -n "$cgbase" ] && [ -d "$cgbase" ] || return 0
  find "$cgbase" -depth -type d -exec rmdir {} + 2>/dev/null || true
}
