/*
 * Stand-in libnvidia-ml.so.1 for simulated GPU hosts.
 *
 * Built against the real nvml.h (PyPI nvidia-nvml-dev), so every struct has
 * the driver's layout, and loaded by the unmodified pynvml through the normal
 * library search.
 *
 * Nothing here is stored: the state of each GPU is derived from the real
 * processes of the host, at each call, the way the driver sees it.
 *   - A context belongs to an open file description of /dev/nvidiaN, as with
 *     the real driver. Its creator declares it in a claim,
 *     /run/gpusim/claims/<pid>-<start> (start = field 22 of /proc/PID/stat),
 *     one line per GPU with its memory and a context id, and takes an OFD
 *     read lock at that id's offset on its descriptor of /dev/nvidiaN. Such a
 *     lock lives exactly as long as the description: while any thread, forked
 *     child or receiver of the descriptor (SCM_RIGHTS) keeps it open, the
 *     memory stays used and the creator's PID stays listed, even after the
 *     creator has died; the last close frees it. /proc/locks shows the locks.
 *   - A process holding only /dev/nvidiactl and /dev/nvidiaN (NVML clients,
 *     like this library's callers) has no context: no memory, in no list.
 *   - The claim of a dead process may say "release stuck" (memory stays used,
 *     no process listed, until nvidia-smi --gpu-reset) or "release slow K"
 *     (memory stays used for K seconds after the death is first observed).
 *
 * Settings come from /etc/gpusim/gpusim.conf (key=value), read at every call:
 *   gpus, memory_mib, reserved_mib, name, driver_version, cuda_version,
 *   persistence_mode (default for /run/gpusim/persistence/N),
 *   nvml = ok | hang | no-driver, hang_at = init | query, hang_seconds,
 *   pid_offset (added to every PID reported: an old driver reporting host
 *   PIDs to a caller in a container, whose own PIDs are other numbers).
 *
 * In a container (the NVIDIA container toolkit's way: /dev/nvidiaN keep their
 * host names, this library and /run/gpusim/claims are passed in):
 *   - the devices are the /dev/nvidiaN nodes present, counted from 0 in the
 *     order of their minor numbers; a device's minor number stays N;
 *   - a claim written in another PID namespace says so ("pidns INODE"); its
 *     PID is translated into the caller's namespace through /proc
 *     (NSpid of a process in that namespace), as the driver does. A PID the
 *     caller cannot see (a claim of the host's namespace, read in a
 *     container) is reported as its creator's namespace numbers it, as old
 *     drivers report host PIDs to a caller in a container.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define CONF_PATH "/etc/gpusim/gpusim.conf"
#define STATE_DIR "/run/gpusim"
#define CLAIMS_DIR STATE_DIR "/claims"
#define MAX_GPUS 64
#define MAX_PROCS 4096
#define MIB (1024ULL * 1024ULL)

#define TYPE_COMPUTE 0
#define TYPE_GRAPHICS 1

struct nvmlDevice_st {
    unsigned int index;
};

typedef struct {
    unsigned int gpus;
    unsigned long long memory_mib;
    unsigned long long reserved_mib;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda_version;
    int persistence_mode;
    char nvml[32];
    char hang_at[32];
    unsigned int hang_seconds;
    long pid_offset;
} sim_conf_t;

typedef struct {
    unsigned int pid;
    unsigned int gpu;
    int type;
    unsigned long long bytes;
} sim_proc_t;

typedef struct {
    unsigned long long used_bytes[MAX_GPUS];
    unsigned int nprocs;
    sim_proc_t procs[MAX_PROCS];
} sim_view_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int init_count;
static int ctl_fd = -1;
/* NVML maps the control node, as the real library does: /proc/PID/maps of an
 * NVML client shows /dev/nvidiactl, never a /dev/nvidiaN. */
static void *ctl_map = MAP_FAILED;
static int gpu_fds[MAX_GPUS];
static unsigned int attached;
static struct nvmlDevice_st devices[MAX_GPUS];

/* HGX H100/H200 baseboards put the eight GPUs on these buses. */
static const unsigned int pci_buses[8] = {0x18, 0x2a, 0x3a, 0x5d,
                                          0x9a, 0xab, 0xba, 0xdb};

/* ------------------------------------------------------------ settings */

static void trim(char *s)
{
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
}

static void load_conf(sim_conf_t *conf)
{
    FILE *f;
    char line[512];

    memset(conf, 0, sizeof(*conf));
    conf->gpus = 8;
    conf->memory_mib = 98304;
    conf->reserved_mib = 615;
    snprintf(conf->name, sizeof(conf->name), "NVIDIA H200");
    snprintf(conf->driver_version, sizeof(conf->driver_version), "580.159.04");
    conf->cuda_version = 13000;
    conf->persistence_mode = 1;
    snprintf(conf->nvml, sizeof(conf->nvml), "ok");
    snprintf(conf->hang_at, sizeof(conf->hang_at), "init");
    conf->hang_seconds = 3600;
    conf->pid_offset = 0;

    f = fopen(CONF_PATH, "re");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *eq, *key = line, *value;
        if (line[0] == '#')
            continue;
        eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        value = eq + 1;
        trim(key);
        trim(value);
        if (!strcmp(key, "gpus"))
            conf->gpus = (unsigned int)strtoul(value, NULL, 10);
        else if (!strcmp(key, "memory_mib"))
            conf->memory_mib = strtoull(value, NULL, 10);
        else if (!strcmp(key, "reserved_mib"))
            conf->reserved_mib = strtoull(value, NULL, 10);
        else if (!strcmp(key, "name"))
            snprintf(conf->name, sizeof(conf->name), "%s", value);
        else if (!strcmp(key, "driver_version"))
            snprintf(conf->driver_version, sizeof(conf->driver_version), "%s", value);
        else if (!strcmp(key, "cuda_version"))
            conf->cuda_version = atoi(value);
        else if (!strcmp(key, "persistence_mode"))
            conf->persistence_mode = atoi(value) ? 1 : 0;
        else if (!strcmp(key, "nvml"))
            snprintf(conf->nvml, sizeof(conf->nvml), "%s", value);
        else if (!strcmp(key, "hang_at"))
            snprintf(conf->hang_at, sizeof(conf->hang_at), "%s", value);
        else if (!strcmp(key, "hang_seconds"))
            conf->hang_seconds = (unsigned int)strtoul(value, NULL, 10);
        else if (!strcmp(key, "pid_offset"))
            conf->pid_offset = strtol(value, NULL, 10);
    }
    fclose(f);
    if (conf->gpus > MAX_GPUS)
        conf->gpus = MAX_GPUS;
}

/* A driver stuck in the kernel: block the caller, as a real hang does. */
static void hang(const sim_conf_t *conf)
{
    struct timespec until, now;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += conf->hang_seconds;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec >= until.tv_sec)
            return;
        sleep(1);
    }
}

/* The minor numbers of the /dev/nvidiaN nodes present, in order: NVML's indexes. */
static unsigned int present_minors(const sim_conf_t *conf, unsigned int *minors)
{
    unsigned int g, n = 0;
    struct stat st;
    for (g = 0; g < conf->gpus && g < MAX_GPUS; g++) {
        char path[64];
        snprintf(path, sizeof(path), "/dev/nvidia%u", g);
        if (stat(path, &st) == 0)
            minors[n++] = g;
    }
    return n;
}

/* Common entry of every device query. */
static nvmlReturn_t enter(sim_conf_t *conf, nvmlDevice_t device)
{
    load_conf(conf);
    if (!init_count)
        return NVML_ERROR_UNINITIALIZED;
    if (!strcmp(conf->nvml, "hang") && !strcmp(conf->hang_at, "query"))
        hang(conf);
    if (!strcmp(conf->nvml, "no-driver"))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    if (device) {
        if (device < devices || device >= devices + MAX_GPUS ||
            device->index >= conf->gpus)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ /proc */

static int read_stat(unsigned int pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024], *p;
    int fd, n, field;

    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = (int)read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return -1;
    p += 2;
    *state = *p;
    /* p points at field 3 (state); start time is field 22. */
    for (field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (!p)
        return -1;
    *start = strtoull(p, NULL, 10);
    return 0;
}

typedef struct {
    int gpu;
    unsigned long long mib;
    int type;
    unsigned long long context; /* the OFD lock offset that marks the context */
} claim_line_t;

typedef struct {
    char release[16]; /* normal, stuck, slow */
    double slow_seconds;
    unsigned long long pidns; /* the creator's PID namespace (inode), 0: not said */
    int nlines;
    claim_line_t lines[MAX_GPUS];
} claim_t;

static int read_claim(const char *path, claim_t *claim)
{
    FILE *f = fopen(path, "re");
    char line[256];

    memset(claim, 0, sizeof(*claim));
    snprintf(claim->release, sizeof(claim->release), "normal");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        char word[32] = "", kind[32] = "compute";
        double seconds = 0;
        int gpu;
        unsigned long long mib, context = 0;
        if (sscanf(line, "pidns %llu", &claim->pidns) == 1) {
            continue;
        } else if (sscanf(line, "release %31s %lf", word, &seconds) >= 1) {
            snprintf(claim->release, sizeof(claim->release), "%s", word);
            claim->slow_seconds = seconds;
        } else if (sscanf(line, "%d %llu %31s %llu", &gpu, &mib, kind, &context) >= 2 &&
                   gpu >= 0 && gpu < MAX_GPUS && claim->nlines < MAX_GPUS) {
            claim->lines[claim->nlines].gpu = gpu;
            claim->lines[claim->nlines].mib = mib;
            claim->lines[claim->nlines].context = context;
            claim->lines[claim->nlines].type =
                strcmp(kind, "graphics") ? TYPE_COMPUTE : TYPE_GRAPHICS;
            claim->nlines++;
        }
    }
    fclose(f);
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Seconds since the death of a claim's process was first observed. */
static double seconds_since_gone(const char *claim_path)
{
    char path[600], buf[64];
    int fd, n;
    double then;

    snprintf(path, sizeof(path), "%s.gone", claim_path);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
        n = snprintf(buf, sizeof(buf), "%.3f\n", now_seconds());
        if (write(fd, buf, (size_t)n) < 0) {
            /* Nothing to do: the next call will try again. */
        }
        close(fd);
        return 0.0;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0.0;
    n = (int)read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0.0;
    buf[n] = '\0';
    then = strtod(buf, NULL);
    return now_seconds() - then;
}

static void forget_claim(const char *claim_path)
{
    char path[600];
    snprintf(path, sizeof(path), "%s.gone", claim_path);
    unlink(claim_path);
    unlink(path);
}

static void add_proc(sim_view_t *view, unsigned int pid, unsigned int gpu, int type,
                     unsigned long long bytes)
{
    if (view->nprocs >= MAX_PROCS)
        return;
    view->procs[view->nprocs].pid = pid;
    view->procs[view->nprocs].gpu = gpu;
    view->procs[view->nprocs].type = type;
    view->procs[view->nprocs].bytes = bytes;
    view->nprocs++;
}

/*
 * Live contexts, from /proc/locks. A holder takes an OFD read lock on its
 * /dev/nvidiaN descriptor at the byte offset of its context id: such a lock
 * belongs to the open file description, so it lives exactly as long as some
 * process (the creator, a thread of it, a forked child, a receiver of the
 * descriptor) keeps that description open, as a CUDA context does.
 */
typedef struct {
    unsigned int gpu;
    unsigned long long id;
} context_t;

typedef struct {
    unsigned int n;
    context_t items[MAX_PROCS];
} contexts_t;

static void live_contexts(const sim_conf_t *conf, contexts_t *out)
{
    struct stat nodes[MAX_GPUS];
    int have[MAX_GPUS];
    char line[512];
    unsigned int g;
    FILE *f;

    out->n = 0;
    for (g = 0; g < conf->gpus && g < MAX_GPUS; g++) {
        char path[64];
        snprintf(path, sizeof(path), "/dev/nvidia%u", g);
        have[g] = stat(path, &nodes[g]) == 0;
    }
    f = fopen("/proc/locks", "re");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        char *tok, *save = NULL;
        int ofd = 0, blocked = 0;
        unsigned int major = 0, minor = 0;
        unsigned long long ino = 0, start = 0;
        int found = 0;

        for (tok = strtok_r(line, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
            if (!strcmp(tok, "->"))
                blocked = 1;
            else if (!strcmp(tok, "OFDLCK"))
                ofd = 1;
            else if (strchr(tok, ':') && strchr(tok, ':') != strrchr(tok, ':')) {
                if (sscanf(tok, "%x:%x:%llu", &major, &minor, &ino) == 3) {
                    char *next = strtok_r(NULL, " \t\n", &save);
                    if (next) {
                        start = strtoull(next, NULL, 10);
                        found = 1;
                    }
                }
                break;
            }
        }
        if (!found || !ofd || blocked)
            continue;
        for (g = 0; g < conf->gpus && g < MAX_GPUS; g++) {
            if (!have[g] || nodes[g].st_ino != ino || major(nodes[g].st_dev) != major ||
                minor(nodes[g].st_dev) != minor)
                continue;
            if (out->n < MAX_PROCS) {
                out->items[out->n].gpu = g;
                out->items[out->n].id = start;
                out->n++;
            }
        }
    }
    fclose(f);
}

static int context_alive(const contexts_t *live, unsigned int gpu, unsigned long long id)
{
    unsigned int i;
    for (i = 0; i < live->n; i++)
        if (live->items[i].gpu == gpu && live->items[i].id == id)
            return 1;
    return 0;
}

static contexts_t live_buffer;

static unsigned long long pidns_of(const char *pid)
{
    char path[300];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%s/ns/pid", pid);
    return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/* The innermost PID (last of NSpid) of /proc/PID/status, 0 when unreadable. */
static unsigned int innermost_pid(const char *pid)
{
    char path[300], line[256];
    unsigned int found = 0;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%s/status", pid);
    f = fopen(path, "re");
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "NSpid:", 6)) {
            char *tok, *save = NULL;
            for (tok = strtok_r(line + 6, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save))
                found = (unsigned int)strtoul(tok, NULL, 10);
            break;
        }
    }
    fclose(f);
    return found;
}

/*
 * The PID, in the caller's namespace, of the process that is PID `pid` in
 * namespace `pidns` (0 when the caller cannot see it), as the driver's
 * os_find_ns_pid does.
 */
static unsigned int translate_pid(unsigned long long pidns, unsigned int pid)
{
    DIR *proc;
    struct dirent *ent;
    unsigned int found = 0;

    proc = opendir("/proc");
    while (proc && (ent = readdir(proc))) {
        if (!isdigit((unsigned char)ent->d_name[0]))
            continue;
        if (pidns_of(ent->d_name) == pidns && innermost_pid(ent->d_name) == pid) {
            found = (unsigned int)strtoul(ent->d_name, NULL, 10);
            break;
        }
    }
    if (proc)
        closedir(proc);
    return found;
}

static void scan(const sim_conf_t *conf, sim_view_t *view)
{
    DIR *claims;
    struct dirent *ent;
    char path[512];
    unsigned int i;

    memset(view->used_bytes, 0, sizeof(view->used_bytes));
    view->nprocs = 0;
    live_contexts(conf, &live_buffer);

    claims = opendir(CLAIMS_DIR);
    while (claims && (ent = readdir(claims))) {
        unsigned int pid;
        unsigned long long start, now_start;
        char state, *dash;
        int any_live = 0, creator_alive;
        claim_t claim;

        if (!isdigit((unsigned char)ent->d_name[0]) || strchr(ent->d_name, '.'))
            continue; /* .gone markers and temporary files */
        dash = strchr(ent->d_name, '-');
        if (!dash)
            continue;
        pid = (unsigned int)strtoul(ent->d_name, NULL, 10);
        start = strtoull(dash + 1, NULL, 10);
        snprintf(path, sizeof(path), CLAIMS_DIR "/%s", ent->d_name);
        if (read_claim(path, &claim) < 0)
            continue;
        /* Not found: an old driver's answer, the PID as its creator's namespace numbers it. */
        if (claim.pidns && claim.pidns != pidns_of("self") && translate_pid(claim.pidns, pid))
            pid = translate_pid(claim.pidns, pid);
        /* The creator is listed while anyone keeps its context, even after its death. */
        for (i = 0; i < (unsigned int)claim.nlines; i++) {
            unsigned int g = (unsigned int)claim.lines[i].gpu;
            if (g >= conf->gpus || !context_alive(&live_buffer, g, claim.lines[i].context))
                continue;
            any_live = 1;
            view->used_bytes[g] += claim.lines[i].mib * MIB;
            if (pid)
                add_proc(view, (unsigned int)((long)pid + conf->pid_offset), g, claim.lines[i].type,
                         claim.lines[i].mib * MIB);
        }
        if (any_live)
            continue;
        creator_alive = pid && read_stat(pid, &state, &now_start) == 0 && now_start == start &&
                        state != 'X';
        if (creator_alive && state != 'Z')
            continue; /* alive, but its contexts are closed: nothing used */
        if (!strcmp(claim.release, "stuck")) {
            /* The driver kept the context: used, but no process to list. */
        } else if (!strcmp(claim.release, "slow") &&
                   seconds_since_gone(path) < claim.slow_seconds) {
            /* Still being torn down. */
        } else {
            if (!creator_alive)
                forget_claim(path);
            continue;
        }
        for (i = 0; i < (unsigned int)claim.nlines; i++) {
            unsigned int g = (unsigned int)claim.lines[i].gpu;
            if (g < conf->gpus)
                view->used_bytes[g] += claim.lines[i].mib * MIB;
        }
    }
    if (claims)
        closedir(claims);
}

/* ------------------------------------------------------------ identity */

static unsigned long long fnv1a(const char *s, unsigned long long seed)
{
    unsigned long long h = 1469598103934665603ULL ^ seed;
    while (*s) {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    /* splitmix64 finaliser: neighbouring GPUs get unrelated UUIDs */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return h;
}

static void gpu_uuid(unsigned int index, char *out, size_t len)
{
    char host[256] = "", key[300];
    unsigned long long a, b;

    gethostname(host, sizeof(host) - 1);
    snprintf(key, sizeof(key), "%s/%u", host, index);
    a = fnv1a(key, 0x9e3779b97f4a7c15ULL);
    b = fnv1a(key, 0xc2b2ae3d27d4eb4fULL);
    snprintf(out, len, "GPU-%08llx-%04llx-%04llx-%04llx-%012llx",
             a >> 32, (a >> 16) & 0xffff, a & 0xffff, b >> 48,
             b & 0xffffffffffffULL);
}

static unsigned int gpu_bus(unsigned int index)
{
    return index < 8 ? pci_buses[index] : 0xe0 + (index - 8) % 0x1f;
}

static int read_persistence(const sim_conf_t *conf, unsigned int index)
{
    char path[128], buf[8] = "";
    FILE *f;

    snprintf(path, sizeof(path), STATE_DIR "/persistence/%u", index);
    f = fopen(path, "re");
    if (!f)
        return conf->persistence_mode;
    if (!fgets(buf, sizeof(buf), f))
        buf[0] = '\0';
    fclose(f);
    return buf[0] == '1';
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ init */

nvmlReturn_t DECLDIR nvmlInitWithFlags(unsigned int flags)
{
    sim_conf_t conf;
    unsigned int i;
    nvmlReturn_t ret = NVML_SUCCESS;

    load_conf(&conf);
    pthread_mutex_lock(&lock);
    if (init_count) {
        init_count++;
        pthread_mutex_unlock(&lock);
        return NVML_SUCCESS;
    }
    if (!strcmp(conf.nvml, "no-driver")) {
        ret = NVML_ERROR_DRIVER_NOT_LOADED;
        goto out;
    }
    ctl_fd = open("/dev/nvidiactl", O_RDWR | O_CLOEXEC);
    if (ctl_fd < 0) {
        ret = errno == EACCES || errno == EPERM ? NVML_ERROR_NO_PERMISSION
                                                : NVML_ERROR_DRIVER_NOT_LOADED;
        goto out;
    }
    ctl_map = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, ctl_fd, 0);
    if (!strcmp(conf.nvml, "hang") && strcmp(conf.hang_at, "query"))
        hang(&conf);
    attached = 0;
    for (i = 0; i < MAX_GPUS; i++) {
        devices[i].index = i;
        gpu_fds[i] = -1;
    }
    if (!(flags & NVML_INIT_FLAG_NO_ATTACH)) {
        for (i = 0; i < conf.gpus; i++) {
            char path[64];
            snprintf(path, sizeof(path), "/dev/nvidia%u", i);
            gpu_fds[i] = open(path, O_RDWR | O_CLOEXEC);
            if (gpu_fds[i] >= 0)
                attached++;
        }
        if (!attached && conf.gpus && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
            if (ctl_map != MAP_FAILED)
                munmap(ctl_map, 4096);
            ctl_map = MAP_FAILED;
            close(ctl_fd);
            ctl_fd = -1;
            ret = NVML_ERROR_NO_PERMISSION;
            goto out;
        }
    }
    init_count = 1;
out:
    pthread_mutex_unlock(&lock);
    return ret;
}

nvmlReturn_t DECLDIR nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t DECLDIR nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t DECLDIR nvmlShutdown(void)
{
    unsigned int i;

    pthread_mutex_lock(&lock);
    if (!init_count) {
        pthread_mutex_unlock(&lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    if (--init_count == 0) {
        for (i = 0; i < MAX_GPUS; i++) {
            if (gpu_fds[i] >= 0)
                close(gpu_fds[i]);
            gpu_fds[i] = -1;
        }
        if (ctl_map != MAP_FAILED)
            munmap(ctl_map, 4096);
        ctl_map = MAP_FAILED;
        if (ctl_fd >= 0)
            close(ctl_fd);
        ctl_fd = -1;
    }
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

const DECLDIR char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt request issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------ system */

nvmlReturn_t DECLDIR nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    return copy_string(version, length, conf.driver_version);
}

nvmlReturn_t DECLDIR nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    sim_conf_t conf;
    char buf[96];
    load_conf(&conf);
    snprintf(buf, sizeof(buf), "%d.%s", conf.cuda_version / 1000, conf.driver_version);
    return copy_string(version, length, buf);
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    sim_conf_t conf;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    load_conf(&conf);
    *cudaDriverVersion = conf.cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ------------------------------------------------------------ devices */

nvmlReturn_t DECLDIR nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int minors[MAX_GPUS];
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = present_minors(&conf, minors);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int minors[MAX_GPUS];
    if (!device || index >= present_minors(&conf, minors))
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[minors[index]];
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    sim_conf_t conf;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned int i;
    nvmlReturn_t ret = enter(&conf, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < conf.gpus; i++) {
        gpu_uuid(i, buf, sizeof(buf));
        if (!strcmp(buf, uuid)) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    sim_conf_t conf;
    unsigned int i, domain = 0, bus = 0, dev = 0;
    nvmlReturn_t ret = enter(&conf, NULL);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!pciBusId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &dev) != 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < conf.gpus; i++) {
        if (domain == 0 && bus == gpu_bus(i) && dev == 0) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t DECLDIR nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

nvmlReturn_t DECLDIR nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned int minors[MAX_GPUS], n, i;
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    n = present_minors(&conf, minors);
    for (i = 0; i < n; i++) {
        if (minors[i] == device->index) {
            *index = i;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t DECLDIR nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    return copy_string(name, length, conf.name);
}

nvmlReturn_t DECLDIR nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    sim_conf_t conf;
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    gpu_uuid(device->index, buf, sizeof(buf));
    return copy_string(uuid, length, buf);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!minorNumber)
        return NVML_ERROR_INVALID_ARGUMENT;
    *minorNumber = device->index;
    return NVML_SUCCESS;
}

static void fill_pci(unsigned int index, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    pci->domain = 0;
    pci->bus = gpu_bus(index);
    pci->device = 0;
    pci->pciDeviceId = 0x233510DE;
    pci->pciSubSystemId = 0x18BE10DE;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy),
             NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, pci->domain, pci->bus, pci->device);
    snprintf(pci->busId, sizeof(pci->busId),
             NVML_DEVICE_PCI_BUS_ID_FMT, NVML_DEVICE_PCI_BUS_ID_FMT_ARGS(pci));
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    fill_pci(device->index, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

nvmlReturn_t DECLDIR nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

static sim_view_t view_buffer;

static void gpu_memory(const sim_conf_t *conf, unsigned int index,
                       unsigned long long *total, unsigned long long *reserved,
                       unsigned long long *used)
{
    unsigned long long usable;
    pthread_mutex_lock(&lock);
    scan(conf, &view_buffer);
    *used = view_buffer.used_bytes[index];
    pthread_mutex_unlock(&lock);
    *total = conf->memory_mib * MIB;
    *reserved = conf->reserved_mib * MIB;
    usable = *total > *reserved ? *total - *reserved : 0;
    if (*used > usable)
        *used = usable;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    sim_conf_t conf;
    unsigned long long total, reserved, used;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    gpu_memory(&conf, device->index, &total, &reserved, &used);
    /* v1: "used" is reserved plus allocated, as the real driver reports. */
    memory->total = total;
    memory->used = used + reserved;
    memory->free = total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    sim_conf_t conf;
    unsigned long long total, reserved, used;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    gpu_memory(&conf, device->index, &total, &reserved, &used);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - reserved - used;
    return NVML_SUCCESS;
}

/* The two-call pattern of the process lists, shared by every version. */
static nvmlReturn_t list_processes(nvmlDevice_t device, int type, unsigned int *infoCount,
                                   void *infos, size_t stride, int legacy)
{
    sim_conf_t conf;
    unsigned int i, n = 0, want;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    want = *infoCount;
    pthread_mutex_lock(&lock);
    scan(&conf, &view_buffer);
    for (i = 0; i < view_buffer.nprocs; i++) {
        sim_proc_t *p = &view_buffer.procs[i];
        if (p->gpu != device->index || p->type != type)
            continue;
        if (infos && n < want) {
            char *slot = (char *)infos + stride * n;
            if (legacy) {
                nvmlProcessInfo_v1_t *info = (nvmlProcessInfo_v1_t *)slot;
                info->pid = p->pid;
                info->usedGpuMemory = p->bytes;
            } else {
                nvmlProcessInfo_t *info = (nvmlProcessInfo_t *)slot;
                info->pid = p->pid;
                info->usedGpuMemory = p->bytes;
                info->gpuInstanceId = 0xFFFFFFFF;
                info->computeInstanceId = 0xFFFFFFFF;
            }
        }
        n++;
    }
    pthread_mutex_unlock(&lock);
    *infoCount = n;
    if (n == 0)
        return NVML_SUCCESS;
    if (!infos || n > want)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    return list_processes(device, TYPE_COMPUTE, infoCount, infos, sizeof(*infos), 0);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)
{
    return list_processes(device, TYPE_COMPUTE, infoCount, infos, sizeof(*infos), 0);
}

nvmlReturn_t DECLDIR nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos)
{
    return list_processes(device, TYPE_COMPUTE, infoCount, infos, sizeof(*infos), 1);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    return list_processes(device, TYPE_GRAPHICS, infoCount, infos, sizeof(*infos), 0);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)
{
    return list_processes(device, TYPE_GRAPHICS, infoCount, infos, sizeof(*infos), 0);
}

nvmlReturn_t DECLDIR nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos)
{
    return list_processes(device, TYPE_GRAPHICS, infoCount, infos, sizeof(*infos), 1);
}

/* No MPS server runs on a simulated host: the lists are always empty. */
nvmlReturn_t DECLDIR nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    (void)infos;
    if (ret != NVML_SUCCESS)
        return ret;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *infoCount = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v2_t *infos)
{
    return nvmlDeviceGetMPSComputeRunningProcesses_v3(device, infoCount, infos);
}

nvmlReturn_t DECLDIR nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = read_persistence(&conf, device->index) ? NVML_FEATURE_ENABLED
                                                   : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
    sim_conf_t conf;
    char path[128];
    FILE *f;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    mkdir(STATE_DIR, 0755);
    mkdir(STATE_DIR "/persistence", 0755);
    snprintf(path, sizeof(path), STATE_DIR "/persistence/%u", device->index);
    f = fopen(path, "we");
    if (!f)
        return NVML_ERROR_UNKNOWN;
    fprintf(f, "%d\n", mode == NVML_FEATURE_ENABLED ? 1 : 0);
    fclose(f);
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t DECLDIR nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    return nvmlDeviceGetDisplayActive(device, display);
}

nvmlReturn_t DECLDIR nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    sim_conf_t conf;
    nvmlReturn_t ret = enter(&conf, device);
    (void)currentMode;
    (void)pendingMode;
    if (ret != NVML_SUCCESS)
        return ret;
    return NVML_ERROR_NOT_SUPPORTED;
}
