/* Durable renames: after fsync(file) and rename(), the directory entry is
 * durable only once the directory itself is fsynced. Shared by the token
 * shard writer (lib/data) and the checkpoint commit (lib/ckpt). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"

int llmt__fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    /* Some filesystems refuse fsync on directories; the rename is still
     * ordered after the file's fsync there. */
    if (r && (errno == EINVAL || errno == ENOTSUP))
        r = 0;
    close(fd);
    return r;
}

int llmt__fsync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return llmt__fsync_dir(dir);
}
