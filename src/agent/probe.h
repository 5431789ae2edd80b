/*
 * probe.h - `gpuorch agent --probe`: what NVML reports (devices, the
 * inventory the agent would register, one sample; each MIG-capable GPU's
 * MIG mode, profiles with their placements and instances with their MIG
 * UUIDs, as nvidia-smi mig -lgip / -lgip -p / -lgi show them) and where the automatic
 * cgroup root and each limit would go, as JSON on stdout. Reads only:
 * changes nothing on the node.
 */
#ifndef GPUORCH_AGENT_PROBE_H
#define GPUORCH_AGENT_PROBE_H

/* nvml: the library to load (NULL: the system's libnvidia-ml.so.1). The
 * command's exit status: 0, or 1 with the reason on stderr. */
int agent_probe(const char *nvml);

#endif
