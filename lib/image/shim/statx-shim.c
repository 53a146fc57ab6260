/*
 * Lazaret statx shim, installed as /usr/lib/lazaret-statx-shim.so and listed
 * in /etc/ld.so.preload of the default image when the installed runsc needs
 * it.
 *
 * runsc 20221219 rejects statx(..., AT_NO_AUTOMOUNT) with EINVAL, so Debian's
 * coreutils (`ls PATH`, `ls -l`, `stat`) fail with "Invalid argument" inside
 * the sandbox. AT_NO_AUTOMOUNT has no effect there anyway (no automounts), so
 * this wrapper clears the flag and makes the raw system call.
 *
 * Freestanding: it is loaded into the image's programs, whatever C library
 * Lazaret itself was built with (glibc or musl), so it includes no header
 * and links no libc. errno is set through __errno_location, which both
 * glibc and musl export, resolved when the image's program loads it.
 */
#if !defined(__x86_64__)
#error "the statx shim is written for x86_64"
#endif

#define LAZARET_SYS_statx 332L
#define LAZARET_AT_NO_AUTOMOUNT 0x800

extern int *__errno_location(void);
struct statx;

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
    long ret;
    register long r10 __asm__("r10") = (long)mask;
    register long r8 __asm__("r8") = (long)buf;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(LAZARET_SYS_statx), "D"((long)dirfd), "S"(path),
                       "d"((long)(flags & ~LAZARET_AT_NO_AUTOMOUNT)), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    if (ret < 0 && ret > -4096) {
        *__errno_location() = (int)-ret;
        return -1;
    }
    return (int)ret;
}
