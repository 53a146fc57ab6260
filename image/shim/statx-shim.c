/*
 * Lazaret statx shim, installed as /usr/lib/lazaret-statx-shim.so and listed
 * in /etc/ld.so.preload of the default image when the installed runsc needs
 * it.
 *
 * runsc 20221219 rejects statx(..., AT_NO_AUTOMOUNT) with EINVAL, so Debian's
 * coreutils (`ls PATH`, `ls -l`, `stat`) fail with "Invalid argument" inside
 * the sandbox. AT_NO_AUTOMOUNT has no effect there anyway (no automounts), so
 * this wrapper clears the flag and makes the raw system call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef AT_NO_AUTOMOUNT
#define AT_NO_AUTOMOUNT 0x800
#endif

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf)
{
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}
