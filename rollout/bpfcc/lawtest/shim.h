/* Host shim for the BPF control laws (rollout/bpf/cc/bbr2_law.h, vivace_law.h): the kernel's integer types and
 * attributes, so that the same C compiles for the host. */
#ifndef CCAB_LAW_SHIM_H
#define CCAB_LAW_SHIM_H
#include <stdint.h>
#include <string.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;
typedef uint8_t __u8;
typedef uint32_t __u32;
typedef uint64_t __u64;
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#endif
