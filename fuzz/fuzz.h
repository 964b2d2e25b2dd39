/*
 * fuzz/fuzz.h: the libFuzzer entry points the harnesses define. The same
 * harness sources are linked with libFuzzer (AMPC_FUZZ=ON, clang) or with
 * fuzz/replay.c, which feeds committed inputs to them in the normal build.
 */
#ifndef AMPC_FUZZ_H
#define AMPC_FUZZ_H
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A file that holds the bytes data[0..size), rewritten on every call: a memfd
 * opened through /proc/self/fd (its path is returned; valid until the next
 * call). Aborts when the memfd cannot be made (a harness setup failure). */
const char *fuzz_memfile(const uint8_t *data, size_t size);
#endif
