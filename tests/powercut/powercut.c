/*
 * powercut.c: an LD_PRELOAD shim that records what a process made durable, for the
 * power-cut simulation of tests/it/powercut.rs (docs/reliability.md).
 *
 * A power cut keeps only what was fsynced: a file's bytes as of its last fsync, and a
 * directory's names as of its last fsync. This shim intercepts fsync(2) and fdatasync(2)
 * and, before letting the real call run, records the state the call makes durable:
 *
 *   - a regular file: its whole content, copied to $WEIR_POWERCUT_DIR/store/<seq>
 *   - a directory: its entries (type, inode, name), written to $WEIR_POWERCUT_DIR/store/<seq>
 *
 * and appends one line to $WEIR_POWERCUT_DIR/events:  <seq> <F|D> <inode> <path>
 * It also records, as `<seq> U <inode> <path>`, an inode that an unlink or a rename over an
 * existing name frees (its last link goes), so that the model does not give a later file
 * that reuses the inode number the content of the freed one.
 * Only paths under $WEIR_POWERCUT_ROOT are recorded. The test replays the events up to
 * each cut point over the state the run started from, rebuilds the tree that a power cut
 * at that point would leave, and restarts weir on it.
 *
 * Build: cc -shared -fPIC -O1 -o libpowercut.so powercut.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long seq = 0;

static int (*real_fsync)(int) = NULL;
static int (*real_fdatasync)(int) = NULL;
static int (*real_unlink)(const char *) = NULL;
static int (*real_unlinkat)(int, const char *, int) = NULL;
static int (*real_rename)(const char *, const char *) = NULL;
static int (*real_renameat)(int, const char *, int, const char *) = NULL;
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int) = NULL;

static int under_root(const char *path) {
    const char *root = getenv("WEIR_POWERCUT_ROOT");
    if (!root || !getenv("WEIR_POWERCUT_DIR")) return 0;
    size_t rl = strlen(root);
    return strncmp(path, root, rl) == 0 && (path[rl] == '/' || path[rl] == '\0');
}

static void append_event(char kind, unsigned long ino, const char *path) {
    char events[PATH_MAX];
    snprintf(events, sizeof events, "%s/events", getenv("WEIR_POWERCUT_DIR"));
    FILE *ev = fopen(events, "ae");
    if (ev) {
        fprintf(ev, "%lu %c %lu %s\n", ++seq, kind, ino, path);
        fclose(ev);
    }
}

/* Before a name goes (unlink, or a rename over it): if it is the inode's last link,
 * record the inode as freed. `dirfd`/`name` as for the *at calls. */
static void freeing(int dirfd, const char *name) {
    char path[PATH_MAX];
    if (name[0] == '/') {
        snprintf(path, sizeof path, "%s", name);
    } else {
        char link[64], dir[PATH_MAX];
        ssize_t n;
        if (dirfd == AT_FDCWD) {
            if (!getcwd(dir, sizeof dir)) return;
            n = (ssize_t)strlen(dir);
        } else {
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            n = readlink(link, dir, sizeof dir - 1);
            if (n <= 0) return;
            dir[n] = '\0';
        }
        snprintf(path, sizeof path, "%s/%s", dir, name);
    }
    if (!under_root(path)) return;
    struct stat st;
    if (fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1) return;
    pthread_mutex_lock(&lock);
    append_event('U', (unsigned long)st.st_ino, path);
    pthread_mutex_unlock(&lock);
}

static void copy_file(int wfd, const char *dst) {
    /* The fd may be write-only: read the inode through a new descriptor. */
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", wfd);
    int fd = open(link, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0) {
        close(fd);
        return;
    }
    char buf[65536];
    off_t off = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        ssize_t w = 0;
        while (w < n) {
            ssize_t k = write(out, buf + w, (size_t)(n - w));
            if (k < 0) {
                if (errno == EINTR) continue;
                close(out);
                close(fd);
                return;
            }
            w += k;
        }
        off += n;
    }
    close(out);
    close(fd);
}

static void list_dir(int fd, const char *dst) {
    FILE *out = fopen(dst, "we");
    if (!out) return;
    int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            struct stat st;
            if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            char t = S_ISDIR(st.st_mode) ? 'd' : S_ISREG(st.st_mode) ? 'f' : S_ISLNK(st.st_mode) ? 'l' : 'o';
            fprintf(out, "%c\t%lu\t%s\n", t, (unsigned long)st.st_ino, e->d_name);
        }
        closedir(d);
    } else if (dfd >= 0) {
        close(dfd);
    }
    fclose(out);
}

static void record(int fd) {
    const char *dir = getenv("WEIR_POWERCUT_DIR");
    const char *root = getenv("WEIR_POWERCUT_ROOT");
    if (!dir || !root) return;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return;
    path[n] = '\0';
    size_t rl = strlen(root);
    if (strncmp(path, root, rl) != 0 || (path[rl] != '/' && path[rl] != '\0')) return;
    struct stat st;
    if (fstat(fd, &st) != 0) return;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return;

    pthread_mutex_lock(&lock);
    unsigned long s = ++seq;
    char store[PATH_MAX];
    snprintf(store, sizeof store, "%s/store/%lu", dir, s);
    if (S_ISDIR(st.st_mode)) list_dir(fd, store);
    else copy_file(fd, store);
    char events[PATH_MAX];
    snprintf(events, sizeof events, "%s/events", dir);
    FILE *ev = fopen(events, "ae");
    if (ev) {
        fprintf(ev, "%lu %c %lu %s\n", s, S_ISDIR(st.st_mode) ? 'D' : 'F', (unsigned long)st.st_ino, path);
        fclose(ev);
    }
    pthread_mutex_unlock(&lock);
}

int fsync(int fd) {
    if (!real_fsync) real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    record(fd);
    return real_fsync(fd);
}

int fdatasync(int fd) {
    if (!real_fdatasync) real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    record(fd);
    return real_fdatasync(fd);
}

int unlink(const char *path) {
    if (!real_unlink) real_unlink = (int (*)(const char *))dlsym(RTLD_NEXT, "unlink");
    freeing(AT_FDCWD, path);
    return real_unlink(path);
}

int unlinkat(int dirfd, const char *path, int flags) {
    if (!real_unlinkat) real_unlinkat = (int (*)(int, const char *, int))dlsym(RTLD_NEXT, "unlinkat");
    if (!(flags & AT_REMOVEDIR)) freeing(dirfd, path);
    return real_unlinkat(dirfd, path, flags);
}

int rename(const char *from, const char *to) {
    if (!real_rename) real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    freeing(AT_FDCWD, to);
    return real_rename(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    if (!real_renameat)
        real_renameat = (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    freeing(tofd, to);
    return real_renameat(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    if (!real_renameat2)
        real_renameat2 = (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
    if (!(flags & RENAME_NOREPLACE)) freeing(tofd, to);
    return real_renameat2(fromfd, from, tofd, to, flags);
}
