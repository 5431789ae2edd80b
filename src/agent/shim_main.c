/*
 * shim_main.c - the gpuorch-shim executable: shim_main (shim.h) as main.
 */
#include "agent/shim.h"
#include "base/banned.h"

int main(int argc, char **argv)
{
    return shim_main(argc, argv);
}
