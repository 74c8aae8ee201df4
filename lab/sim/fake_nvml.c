/*
 * The lab's simulated NVML: a libnvidia-ml.so.1 that answers from a hardware profile.
 *
 * Only the lab uses it, at the hardware boundary: gpu_info loads it through nvidia-ml-py exactly as
 * it loads the real library, so the module runs its real code path. It exports the entry points
 * gpu_info calls (and the older names older bindings call), with NVML's C signatures and struct
 * layouts. The answers come from "nvml.conf" in the directory this library was loaded from
 * (written by lab/sim/hardware.py from a profile), so no environment variable is needed.
 *
 * nvml.conf, one "key=value" a line:
 *   driver_loaded=1|0   (0: nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED, as on a node
 *                        whose kernel module is not loaded)
 *   driver_version=550.54.15  nvml_version=12.550.54.15  cuda_version=12040
 *   gpu=INDEX|UUID|NAME|BUS_ID|PCI_DEVICE_ID|SUBSYS_ID|MEMORY_MIB|CC_MAJOR|CC_MINOR|PERSISTENCE|MIG_CAPABLE|MIG_CURRENT|MIG_PENDING
 *   gpu=...|MIG_PENDING|NUMA  (optional: the GPU's NUMA node, for the topology calls; 0 without it)
 *   profile=GPU_INDEX|PROFILE|ID|SLICES|INSTANCES|SMS|CE|DEC|ENC|JPEG|OFA|MEMORY_MB|NAME
 *   profile=...|NAME|PLACEMENTS  (optional: "0,2,4/2", the starts and size of the profile's
 *                        placements among the GPU's memory slices; without it, size = SLICES and
 *                        the starts are its multiples)
 *   mig=GPU_INDEX|SLOT|PROFILE|CI_SLICES|GI_ID|CI_ID|UUID|START
 *                       (a MIG device: a GPU instance of that profile placed at START, holding one
 *                        compute instance of CI_SLICES slices; SLOT is its MIG device index)
 *
 * MIG changes (nvmlDeviceSetMigMode, GPU and compute instances created and destroyed) are kept in
 * "migstate" beside nvml.conf, in the same mig= lines and a mode=GPU_INDEX|CURRENT|PENDING line per GPU:
 * when the file exists it replaces nvml.conf's MIG modes and devices, so every later caller (gpu_info, a
 * new process) sees them. A GPU's MIG mode changes at once unless another process holds the GPU open
 * ("dev/nvidia<INDEX>" beside nvml.conf, the lab's stand-in for /dev/nvidiaN, found through /proc/PID/fd):
 * then the change is left pending (activation status IN_USE), as on a real GPU in use, until the lab's
 * boot (lab/sim/boot.py) applies it and, as a reset does, drops every GPU instance.
 *
 * "fabric", beside nvml.conf and read at every call, holds the NVLink fabric state of every GPU, as
 * nvmlDeviceGetGpuFabricInfo reports it: "STATE STATUS" (STATE not_started, in_progress or completed;
 * STATUS an nvmlReturn_t, 0 for success). Without the file the GPUs have no fabric (NOT_SUPPORTED). The
 * lab writes it from the profile, and its Fabric Manager stand-in moves it to "completed 0".
 *
 * A copy of this library with no nvml.conf beside it (what a container runtime injects: the library file alone)
 * reads the configuration compiled into it, when it was built with one (FAKE_NVML_BUILTIN_CONF, a header
 * lab/sim/hardware.py generates: build_fake_nvml(cache, builtin_conf)); without either, nvmlInit fails.
 *
 * nvmlInit counts: every nvmlInit needs its nvmlShutdown, and only the last one shuts NVML down, as in the
 * real library (a device plugin's health checker and its allocator each hold NVML open).
 *
 * Events: the calls a device plugin's health check makes work, on every GPU, for the event types a data
 * center GPU supports; the lab's GPUs raise none, so a wait always times out (NVML_ERROR_TIMEOUT) after
 * its timeout.
 *
 * Topology: two GPUs' common ancestor is the GPU itself (INTERNAL), the NUMA node when both sit on the same
 * one (gpu= lines' optional NUMA field), else the system. NVLink is not simulated to NVML's callers: every
 * link's state is NOT_SUPPORTED, as on a PCIe GPU, so an allocator places GPUs by PCIe/NUMA distance only.
 *
 * Handles: a GPU handle points at its struct fake_gpu; a MIG device and its GPU instance are each a
 * struct handle inside the struct fake_mig, so every handle can say what it is and which device it
 * belongs to, and a handle of the wrong kind is refused.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 16
#define MAX_PROFILES 32
#define MAX_MIG 8
#define MAX_PLACEMENTS 8

typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} profile_v2_t;

typedef struct {
    unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount;
    unsigned int copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} profile_v1_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* What nvmlDeviceGetPciInfo and _v2 fill: the 16-byte bus id and four reserved words (52 bytes). */
typedef struct {
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved[4];
} nvmlPciInfoLegacy_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

struct fake_profile {
    int used;
    unsigned int id, slices, instances, sms, ce, dec, enc, jpeg, ofa;
    unsigned long long memory_mb;
    char name[96];
    unsigned int starts[MAX_PLACEMENTS], nstarts, size;
};

typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount;
    unsigned int sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int start, size;
} nvmlPlacement_t;

typedef struct {
    void *device;
    unsigned int id, profileId;
    nvmlPlacement_t placement;
} nvmlGpuInstanceInfo_t;

enum handle_kind { KIND_GPU = 0x67707521, KIND_MIG, KIND_GI, KIND_CI, KIND_EVENT_SET };

struct fake_mig;
struct handle {
    unsigned int kind;
    struct fake_mig *mig;
};

/* A GPU instance (used) and its compute instance (has_ci; ci_slices, ci_id, uuid): together one MIG device. */
struct fake_mig {
    int used, has_ci;
    unsigned int profile, ci_slices, gi_id, ci_id, start;
    char uuid[96];
    struct fake_gpu *parent;
    struct handle device, gi, ci;
};

struct fake_gpu {
    unsigned int kind;
    char uuid[96], name[96], bus_id[32];
    unsigned int pci_device_id, subsys_id, cc_major, cc_minor, persistence, mig_capable, mig_current, mig_pending, numa;
    unsigned long long memory_mib;
    struct fake_profile profiles[MAX_PROFILES];
    struct fake_mig migs[MAX_MIG];
};

static struct fake_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static int driver_loaded = 1;
static unsigned int initialised;  /* how many nvmlInit calls have not had their nvmlShutdown yet */
static char driver_version[80] = "", nvml_version[80] = "";
static int cuda_version;

/* Copy a string into a fixed field, cut to fit, always terminated. */
static void copy_field(char *dst, size_t size, const char *src) {
    size_t n = src ? strlen(src) : 0;
    if (n >= size) n = size - 1;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

/* Split "a|b|c" in place into at most max fields; return how many there were. */
static int split_fields(char *value, char **fields, int max) {
    int n = 0;
    for (char *tok = strtok(value, "|"); tok && n < max; tok = strtok(NULL, "|")) fields[n++] = tok;
    return n;
}

static void parse_gpu(char *value) {
    char *f[14];
    int n = split_fields(value, f, 14);
    if (n < 13) return;
    unsigned int i = (unsigned int)atoi(f[0]);
    if (i >= MAX_GPUS) return;
    struct fake_gpu *g = &gpus[i];
    copy_field(g->uuid, sizeof g->uuid, f[1]);
    copy_field(g->name, sizeof g->name, f[2]);
    copy_field(g->bus_id, sizeof g->bus_id, f[3]);
    g->pci_device_id = (unsigned int)strtoul(f[4], NULL, 16);
    g->subsys_id = (unsigned int)strtoul(f[5], NULL, 16);
    g->memory_mib = strtoull(f[6], NULL, 10);
    g->cc_major = (unsigned int)atoi(f[7]);
    g->cc_minor = (unsigned int)atoi(f[8]);
    g->persistence = (unsigned int)atoi(f[9]);
    g->mig_capable = (unsigned int)atoi(f[10]);
    g->mig_current = (unsigned int)atoi(f[11]);
    g->mig_pending = (unsigned int)atoi(f[12]);
    g->numa = n == 14 ? (unsigned int)atoi(f[13]) : 0;
    if (i + 1 > gpu_count) gpu_count = i + 1;
}

static void parse_profile(char *value) {
    char *f[14];
    int n = split_fields(value, f, 14);
    if (n < 13) return;
    unsigned int gi = (unsigned int)atoi(f[0]), p = (unsigned int)atoi(f[1]);
    if (gi >= MAX_GPUS || p >= MAX_PROFILES) return;
    struct fake_profile *pr = &gpus[gi].profiles[p];
    pr->used = 1;
    pr->id = (unsigned int)atoi(f[2]);
    pr->slices = (unsigned int)atoi(f[3]);
    pr->instances = (unsigned int)atoi(f[4]);
    pr->sms = (unsigned int)atoi(f[5]);
    pr->ce = (unsigned int)atoi(f[6]);
    pr->dec = (unsigned int)atoi(f[7]);
    pr->enc = (unsigned int)atoi(f[8]);
    pr->jpeg = (unsigned int)atoi(f[9]);
    pr->ofa = (unsigned int)atoi(f[10]);
    pr->memory_mb = strtoull(f[11], NULL, 10);
    copy_field(pr->name, sizeof pr->name, f[12]);
    pr->nstarts = 0;
    if (n == 14) {  /* "0,2,4/2" */
        char *slash = strchr(f[13], '/');
        pr->size = slash ? (unsigned int)atoi(slash + 1) : pr->slices;
        for (char *p = f[13]; p && *p && *p != '/' && pr->nstarts < MAX_PLACEMENTS; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
            pr->starts[pr->nstarts++] = (unsigned int)atoi(p);
    } else {
        pr->size = pr->slices ? pr->slices : 1;
        for (unsigned int st = 0; st + pr->size <= 8 && pr->nstarts < MAX_PLACEMENTS; st += pr->size) pr->starts[pr->nstarts++] = st;
    }
}

static void parse_mig(char *value) {
    char *f[8];
    int n = split_fields(value, f, 8);
    if (n < 7) return;
    unsigned int gi = (unsigned int)atoi(f[0]), slot = (unsigned int)atoi(f[1]);
    if (gi >= MAX_GPUS || slot >= MAX_MIG) return;
    struct fake_mig *m = &gpus[gi].migs[slot];
    m->used = 1;
    m->has_ci = strcmp(f[5], "-") != 0;
    m->start = n == 8 ? (unsigned int)atoi(f[7]) : 0;
    m->profile = (unsigned int)atoi(f[2]);
    m->ci_slices = (unsigned int)atoi(f[3]);
    m->gi_id = (unsigned int)atoi(f[4]);
    m->ci_id = (unsigned int)atoi(f[5]);
    copy_field(m->uuid, sizeof m->uuid, f[6]);
}

/* Point every handle at what it belongs to, once the whole file is read. */
static void link_handles(void) {
    for (unsigned int i = 0; i < MAX_GPUS; i++) {
        gpus[i].kind = KIND_GPU;
        for (unsigned int s = 0; s < MAX_MIG; s++) {
            struct fake_mig *m = &gpus[i].migs[s];
            m->parent = &gpus[i];
            m->device = (struct handle){KIND_MIG, m};
            m->gi = (struct handle){KIND_GI, m};
            m->ci = (struct handle){KIND_CI, m};
        }
    }
}

/* The path of a file beside this library (nvml.conf, fabric, migstate); 0 when it cannot be known. */
static int path_beside(const char *name, char *path, size_t size) {
    Dl_info info;
    if (!dladdr((void *)path_beside, &info) || !info.dli_fname) return 0;
    copy_field(path, size, info.dli_fname);
    char *slash = strrchr(path, '/');
    if (slash) *(slash + 1) = '\0'; else path[0] = '\0';
    strncat(path, name, size - strlen(path) - 1);
    return 1;
}

static FILE *open_beside(const char *name) {
    char path[4096];
    return path_beside(name, path, sizeof path) ? fopen(path, "r") : NULL;
}

static void parse_mode(char *value) {
    char *f[3];
    if (split_fields(value, f, 3) != 3) return;
    unsigned int i = (unsigned int)atoi(f[0]);
    if (i >= MAX_GPUS) return;
    gpus[i].mig_current = (unsigned int)atoi(f[1]);
    gpus[i].mig_pending = (unsigned int)atoi(f[2]);
}

/* Read "key=value" lines; with state set, only the MIG state (mode= and mig=) is taken. */
static void read_lines(FILE *fp, int state) {
    char line[1024];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = '\0';
        char *key = line, *value = eq + 1;
        if (!strcmp(key, "mig")) parse_mig(value);
        else if (!strcmp(key, "mode")) { if (state) parse_mode(value); }
        else if (state) continue;
        else if (!strcmp(key, "driver_loaded")) driver_loaded = atoi(value);
        else if (!strcmp(key, "driver_version")) copy_field(driver_version, sizeof driver_version, value);
        else if (!strcmp(key, "nvml_version")) copy_field(nvml_version, sizeof nvml_version, value);
        else if (!strcmp(key, "cuda_version")) cuda_version = atoi(value);
        else if (!strcmp(key, "gpu")) parse_gpu(value);
        else if (!strcmp(key, "profile")) parse_profile(value);
    }
}

#ifdef FAKE_NVML_BUILTIN_CONF
#include FAKE_NVML_BUILTIN_CONF  /* defines builtin_conf[], the configuration of the machine it was built for */
#else
static const char builtin_conf[] = "";
#endif

static int load_profile(void) {
    FILE *fp = open_beside("nvml.conf");
    if (!fp && builtin_conf[0]) fp = fmemopen((void *)builtin_conf, strlen(builtin_conf), "r");
    if (!fp) return -1;
    memset(gpus, 0, sizeof gpus);
    gpu_count = 0;
    read_lines(fp, 0);
    fclose(fp);
    FILE *st = open_beside("migstate");
    if (st) {  /* what MIG calls changed since: it replaces the profile's MIG devices */
        for (unsigned int i = 0; i < MAX_GPUS; i++) memset(gpus[i].migs, 0, sizeof gpus[i].migs);
        read_lines(st, 1);
        fclose(st);
    }
    link_handles();
    return 0;
}

/* Write the MIG state of every GPU to migstate, whole, through a rename. */
static nvmlReturn_t save_state(void) {
    char path[4096], tmp[4200];
    if (!path_beside("migstate", path, sizeof path)) return NVML_ERROR_UNKNOWN;
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *fp = fopen(tmp, "w");
    if (!fp) return NVML_ERROR_UNKNOWN;
    for (unsigned int i = 0; i < gpu_count; i++) {
        fprintf(fp, "mode=%u|%u|%u\n", i, gpus[i].mig_current, gpus[i].mig_pending);
        for (unsigned int s = 0; s < MAX_MIG; s++) {
            struct fake_mig *m = &gpus[i].migs[s];
            if (!m->used) continue;
            /* A GPU instance without a compute instance yet: CI_ID is "-". */
            if (m->has_ci) fprintf(fp, "mig=%u|%u|%u|%u|%u|%u|%s|%u\n", i, s, m->profile, m->ci_slices, m->gi_id, m->ci_id, m->uuid, m->start);
            else fprintf(fp, "mig=%u|%u|%u|0|%u|-|-|%u\n", i, s, m->profile, m->gi_id, m->start);
        }
    }
    if (fclose(fp) != 0 || rename(tmp, path) != 0) { unlink(tmp); return NVML_ERROR_UNKNOWN; }
    return NVML_SUCCESS;
}

/* Whether a process other than this one holds GPU index open (its stand-in device file, through /proc). */
static int gpu_in_use(unsigned int index) {
    char dev[4096], name[32];
    snprintf(name, sizeof name, "dev/nvidia%u", index);
    if (!path_beside(name, dev, sizeof dev)) return 0;
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    int found = 0;
    pid_t self = getpid();
    struct dirent *p;
    while (!found && (p = readdir(proc))) {
        char *end;
        long pid = strtol(p->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self) continue;
        char fddir[64];
        snprintf(fddir, sizeof fddir, "/proc/%ld/fd", pid);
        DIR *fds = opendir(fddir);
        if (!fds) continue;
        struct dirent *f;
        while (!found && (f = readdir(fds))) {
            char link[600], target[4096];
            snprintf(link, sizeof link, "%s/%s", fddir, f->d_name);
            ssize_t n = readlink(link, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = '\0';
            found = !strcmp(target, dev);
        }
        closedir(fds);
    }
    closedir(proc);
    return found;
}

static nvmlReturn_t copy_out(char *dst, unsigned int length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

#define NEED_INIT() do { if (!initialised) return NVML_ERROR_UNINITIALIZED; } while (0)
#define GPU(h) ((struct fake_gpu *)(h))
#define NEED_GPU(h) do { NEED_INIT(); if (!(h) || GPU(h)->kind != KIND_GPU) return NVML_ERROR_INVALID_ARGUMENT; } while (0)
/* The MIG device behind a handle of the given kind, or NULL. */
static struct fake_mig *handle_mig(void *h, unsigned int kind) {
    struct handle *hd = h;
    return hd && hd->kind == kind ? hd->mig : NULL;
}
#define NEED_HANDLE(m, h, kind) struct fake_mig *m = handle_mig(h, kind); \
    do { NEED_INIT(); if (!m) return NVML_ERROR_INVALID_ARGUMENT; } while (0)

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (load_profile() != 0) return NVML_ERROR_UNKNOWN;
    if (!driver_loaded) return NVML_ERROR_DRIVER_NOT_LOADED;
    initialised++;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
/* Only the last nvmlShutdown shuts NVML down. */
nvmlReturn_t nvmlShutdown(void) { NEED_INIT(); initialised--; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) { NEED_INIT(); return copy_out(version, length, driver_version); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) { NEED_INIT(); return copy_out(version, length, nvml_version); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { NEED_INIT(); if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = cuda_version; return NVML_SUCCESS; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { return nvmlSystemGetCudaDriverVersion_v2(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) { NEED_INIT(); if (!count) return NVML_ERROR_INVALID_ARGUMENT; *count = gpu_count; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    NEED_INIT();
    if (!device || index >= gpu_count) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void **device) { return nvmlDeviceGetHandleByIndex_v2(index, device); }

nvmlReturn_t nvmlDeviceGetUUID(void *h, char *uuid, unsigned int length) {
    NEED_INIT();
    struct fake_mig *m = handle_mig(h, KIND_MIG);
    if (m) return copy_out(uuid, length, m->uuid);
    NEED_GPU(h);
    return copy_out(uuid, length, GPU(h)->uuid);
}
nvmlReturn_t nvmlDeviceGetName(void *h, char *name, unsigned int length) { NEED_GPU(h); return copy_out(name, length, GPU(h)->name); }

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *pci) {
    NEED_GPU(h);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    unsigned int domain = 0, bus = 0, dev = 0, fn = 0;
    sscanf(GPU(h)->bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = GPU(h)->pci_device_id;
    pci->pciSubSystemId = GPU(h)->subsys_id;
    copy_field(pci->busId, sizeof pci->busId, GPU(h)->bus_id);
    /* The legacy field holds the short form, with a four-digit domain. */
    char legacy[40];
    snprintf(legacy, sizeof legacy, "%04x:%02x:%02x.%x", domain & 0xffff, bus, dev, fn);
    copy_field(pci->busIdLegacy, sizeof pci->busIdLegacy, legacy);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(void *h, nvmlPciInfoLegacy_t *pci) {
    nvmlPciInfo_t full;
    nvmlReturn_t ret = nvmlDeviceGetPciInfo_v3(h, pci ? &full : NULL);
    if (ret != NVML_SUCCESS) return ret;
    memset(pci, 0, sizeof *pci);
    memcpy(pci->busId, full.busIdLegacy, sizeof pci->busId);
    pci->domain = full.domain;
    pci->bus = full.bus;
    pci->device = full.device;
    pci->pciDeviceId = full.pciDeviceId;
    pci->pciSubSystemId = full.pciSubSystemId;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo(void *h, nvmlPciInfoLegacy_t *pci) { return nvmlDeviceGetPciInfo_v2(h, pci); }

nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *mem) {
    NEED_GPU(h);
    if (!mem) return NVML_ERROR_INVALID_ARGUMENT;
    mem->total = GPU(h)->memory_mib * 1024ULL * 1024ULL;
    mem->used = 0;
    mem->free = mem->total;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(void *h, int *major, int *minor) {
    NEED_GPU(h);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = (int)GPU(h)->cc_major;
    *minor = (int)GPU(h)->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(void *h, int *mode) {
    NEED_GPU(h);
    if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
    *mode = (int)GPU(h)->persistence;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned int *current, unsigned int *pending) {
    NEED_GPU(h);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (!GPU(h)->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    *current = GPU(h)->mig_current;
    *pending = GPU(h)->mig_pending;
    return NVML_SUCCESS;
}

/* The v1 and v2 layouts differ (v2 starts with a version and aligns differently), their fields do not. */
#define FILL_PROFILE_INFO(info, p) do { \
    (info)->id = (p)->id; \
    (info)->sliceCount = (p)->slices; \
    (info)->instanceCount = (p)->instances; \
    (info)->multiprocessorCount = (p)->sms; \
    (info)->copyEngineCount = (p)->ce; \
    (info)->decoderCount = (p)->dec; \
    (info)->encoderCount = (p)->enc; \
    (info)->jpegCount = (p)->jpeg; \
    (info)->ofaCount = (p)->ofa; \
    (info)->memorySizeMB = (p)->memory_mb; \
} while (0)

static struct fake_profile *find_profile(void *h, unsigned int profile) {
    if (profile >= MAX_PROFILES || !GPU(h)->mig_capable || !GPU(h)->profiles[profile].used) return NULL;
    return &GPU(h)->profiles[profile];
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(void *h, unsigned int profile, profile_v2_t *info) {
    NEED_GPU(h);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_profile *p = find_profile(h, profile);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int version = info->version;
    memset(info, 0, sizeof *info);
    info->version = version;
    FILL_PROFILE_INFO(info, p);
    snprintf(info->name, sizeof info->name, "MIG %s", p->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(void *h, unsigned int profile, profile_v1_t *info) {
    NEED_GPU(h);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_profile *p = find_profile(h, profile);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    FILL_PROFILE_INFO(info, p);
    return NVML_SUCCESS;
}

/* MIG devices: the largest number of MIG devices the GPU can hold is its 1-slice profile's count. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned int *count) {
    NEED_GPU(h);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    if (!GPU(h)->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int p = 0; p < MAX_PROFILES; p++)
        if (GPU(h)->profiles[p].used && GPU(h)->profiles[p].slices == 1 && GPU(h)->profiles[p].instances > *count)
            *count = GPU(h)->profiles[p].instances;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned int index, void **mig) {
    NEED_GPU(h);
    if (!mig || index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    if (!GPU(h)->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    struct fake_mig *m = &GPU(h)->migs[index];
    if (!GPU(h)->mig_current || !m->used || !m->has_ci) return NVML_ERROR_NOT_FOUND;
    *mig = &m->device;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(void *h, nvmlDeviceAttributes_t *a) {
    NEED_HANDLE(m, h, KIND_MIG);
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_profile *p = &m->parent->profiles[m->profile];
    memset(a, 0, sizeof *a);
    a->gpuInstanceSliceCount = p->slices;
    a->computeInstanceSliceCount = m->ci_slices;
    /* A compute instance smaller than its GPU instance gets its share of the multiprocessors. */
    a->multiprocessorCount = p->slices ? p->sms * m->ci_slices / p->slices : 0;
    a->sharedCopyEngineCount = p->ce;
    a->sharedDecoderCount = p->dec;
    a->sharedEncoderCount = p->enc;
    a->sharedJpegCount = p->jpeg;
    a->sharedOfaCount = p->ofa;
    a->memorySizeMB = p->memory_mb;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetAttributes(void *h, nvmlDeviceAttributes_t *a) { return nvmlDeviceGetAttributes_v2(h, a); }

nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *h, unsigned int *id) {
    NEED_HANDLE(m, h, KIND_MIG);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->gi_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *h, unsigned int *id) {
    NEED_HANDLE(m, h, KIND_MIG);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(void *h, unsigned int id, void **gi) {
    NEED_GPU(h);
    if (!gi) return NVML_ERROR_INVALID_ARGUMENT;
    if (!GPU(h)->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int s = 0; s < MAX_MIG; s++) {
        struct fake_mig *m = &GPU(h)->migs[s];
        if (m->used && m->gi_id == id) {
            *gi = &m->gi;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(void *h, nvmlGpuInstanceInfo_t *info) {
    NEED_HANDLE(m, h, KIND_GI);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->device = m->parent;
    info->id = m->gi_id;
    /* NVML reports the profile's id (the one nvidia-smi shows), not its index. */
    info->profileId = m->parent->profiles[m->profile].id;
    info->placement.start = m->start;
    info->placement.size = m->parent->profiles[m->profile].size;
    return NVML_SUCCESS;
}

/* What nvidia-ctk's CDI spec generation (go-nvlib) asks besides the above. */
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *h, unsigned int *is_mig) {
    NEED_INIT();
    if (!h || !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = handle_mig(h, KIND_MIG) != NULL;
    if (!*is_mig && GPU(h)->kind != KIND_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* A GPU's index and minor number (/dev/nvidiaN) are its position; a MIG device's index is its slot. */
nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned int *index) {
    NEED_INIT();
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_mig *m = handle_mig(h, KIND_MIG);
    if (m) {
        *index = (unsigned int)(m - m->parent->migs);
        return NVML_SUCCESS;
    }
    NEED_GPU(h);
    *index = (unsigned int)(GPU(h) - gpus);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(void *h, unsigned int *minor) {
    NEED_GPU(h);
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = (unsigned int)(GPU(h) - gpus);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *h, void **device) {
    NEED_HANDLE(m, h, KIND_MIG);
    if (!device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = m->parent;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    NEED_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < gpu_count; i++) {
        if (!strcmp(gpus[i].uuid, uuid)) {
            *device = &gpus[i];
            return NVML_SUCCESS;
        }
        for (unsigned int s = 0; s < MAX_MIG; s++) {
            if (gpus[i].migs[s].used && gpus[i].migs[s].has_ci && !strcmp(gpus[i].migs[s].uuid, uuid)) {
                *device = &gpus[i].migs[s].device;
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* nvmlGpuFabricInfo_t: the GPU's place in its NVLink fabric. */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
} nvmlGpuFabricInfo_t;

enum { FABRIC_NOT_SUPPORTED = 0, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED };

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(void *h, nvmlGpuFabricInfo_t *info) {
    NEED_GPU(h);
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    FILE *fp = open_beside("fabric");
    if (!fp) return NVML_ERROR_NOT_SUPPORTED;
    char state[32] = "";
    int status = 0;
    int fields = fscanf(fp, "%31s %d", state, &status);
    fclose(fp);
    memset(info, 0, sizeof *info);
    if (fields < 1) return NVML_ERROR_UNKNOWN;
    if (!strcmp(state, "not_started")) info->state = FABRIC_NOT_STARTED;
    else if (!strcmp(state, "in_progress")) info->state = FABRIC_IN_PROGRESS;
    else if (!strcmp(state, "completed")) info->state = FABRIC_COMPLETED;
    else return NVML_ERROR_UNKNOWN;
    if (info->state == FABRIC_COMPLETED) {
        info->status = fields == 2 ? status : NVML_SUCCESS;
        info->cliqueId = 1;
        for (unsigned int i = 0; i < sizeof info->clusterUuid; i++) info->clusterUuid[i] = (unsigned char)(0x10 + i);
    }
    return NVML_SUCCESS;
}

/* MIG changes: the mode, GPU instances at a placement, one compute instance per GPU instance. */
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount;
    unsigned int sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

/* NVML_COMPUTE_INSTANCE_PROFILE_*: the compute instance's slices by profile enum. */
static const unsigned int CI_SLICES[] = {1, 2, 3, 4, 7, 8, 6};
#define CI_PROFILE_COUNT (sizeof CI_SLICES / sizeof CI_SLICES[0])

nvmlReturn_t nvmlDeviceSetMigMode(void *h, unsigned int mode, nvmlReturn_t *activationStatus) {
    NEED_GPU(h);
    if (!activationStatus || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_gpu *g = GPU(h);
    if (!g->mig_capable) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int s = 0; s < MAX_MIG; s++)
        if (g->migs[s].used && !mode) return NVML_ERROR_IN_USE;  /* GPU instances must go first */
    g->mig_pending = mode;
    if (g->mig_current != mode && gpu_in_use((unsigned int)(g - gpus))) *activationStatus = NVML_ERROR_IN_USE;
    else {
        g->mig_current = mode;
        *activationStatus = NVML_SUCCESS;
    }
    return save_state();
}

/* The GPU-instance profile by its NVML id (what the create and placement calls take). */
static struct fake_profile *profile_by_id(struct fake_gpu *g, unsigned int id, unsigned int *index) {
    for (unsigned int p = 0; p < MAX_PROFILES; p++)
        if (g->profiles[p].used && g->profiles[p].id == id) {
            if (index) *index = p;
            return &g->profiles[p];
        }
    return NULL;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(void *h, unsigned int id, nvmlPlacement_t *placements, unsigned int *count) {
    NEED_GPU(h);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!GPU(h)->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    struct fake_profile *p = profile_by_id(GPU(h), id, NULL);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    if (!placements) { *count = p->nstarts; return NVML_SUCCESS; }
    if (*count < p->nstarts) { *count = p->nstarts; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned int i = 0; i < p->nstarts; i++) placements[i] = (nvmlPlacement_t){p->starts[i], p->size};
    *count = p->nstarts;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(void *h, unsigned int id, const nvmlPlacement_t *placement, void **gi) {
    NEED_GPU(h);
    if (!placement || !gi) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_gpu *g = GPU(h);
    if (!g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int index;
    struct fake_profile *p = profile_by_id(g, id, &index);
    if (!p) return NVML_ERROR_NOT_SUPPORTED;
    int valid = 0;
    for (unsigned int i = 0; i < p->nstarts; i++) valid |= p->starts[i] == placement->start && p->size == placement->size;
    if (!valid) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int same = 0, free_slot = MAX_MIG, gi_id = 1;
    for (unsigned int s = 0; s < MAX_MIG; s++) {
        struct fake_mig *m = &g->migs[s];
        if (!m->used) { if (free_slot == MAX_MIG) free_slot = s; continue; }
        struct fake_profile *q = &g->profiles[m->profile];
        if (placement->start < m->start + q->size && m->start < placement->start + p->size) return NVML_ERROR_INSUFFICIENT_RESOURCES;
        same += m->profile == index;
    }
    if (same >= p->instances || free_slot == MAX_MIG) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    for (int taken = 1; taken; ) {  /* the lowest GPU-instance id not in use */
        taken = 0;
        for (unsigned int s = 0; s < MAX_MIG; s++) if (g->migs[s].used && g->migs[s].gi_id == gi_id) { taken = 1; gi_id++; }
    }
    struct fake_mig *m = &g->migs[free_slot];
    m->used = 1;
    m->has_ci = 0;
    m->profile = index;
    m->start = placement->start;
    m->gi_id = gi_id;
    *gi = &m->gi;
    return save_state();
}

nvmlReturn_t nvmlDeviceGetGpuInstances(void *h, unsigned int id, void **instances, unsigned int *count) {
    NEED_GPU(h);
    if (!instances || !count) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_gpu *g = GPU(h);
    if (!g->mig_current) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int index, n = 0;
    if (!profile_by_id(g, id, &index)) return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int s = 0; s < MAX_MIG; s++) {
        if (!g->migs[s].used || g->migs[s].profile != index) continue;
        if (n >= *count) return NVML_ERROR_INSUFFICIENT_SIZE;
        instances[n++] = &g->migs[s].gi;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(void *h) {
    NEED_HANDLE(m, h, KIND_GI);
    if (m->has_ci) return NVML_ERROR_IN_USE;  /* its compute instances go first */
    memset(m, 0, offsetof(struct fake_mig, parent));
    return save_state();
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(void *h, unsigned int profile, unsigned int engine, nvmlComputeInstanceProfileInfo_t *info) {
    NEED_HANDLE(m, h, KIND_GI);
    if (!info || engine != 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_profile *p = &m->parent->profiles[m->profile];
    if (profile >= CI_PROFILE_COUNT || CI_SLICES[profile] > p->slices) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = CI_SLICES[profile];
    info->instanceCount = p->slices / CI_SLICES[profile];
    info->multiprocessorCount = p->sms * CI_SLICES[profile] / p->slices;
    info->sharedCopyEngineCount = p->ce;
    info->sharedDecoderCount = p->dec;
    info->sharedEncoderCount = p->enc;
    info->sharedJpegCount = p->jpeg;
    info->sharedOfaCount = p->ofa;
    return NVML_SUCCESS;
}

/* One compute instance per GPU instance: the lab's MIG devices are pairs (see struct fake_mig). */
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(void *h, unsigned int profile, void **ci) {
    NEED_HANDLE(m, h, KIND_GI);
    if (!ci) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_profile *p = &m->parent->profiles[m->profile];
    if (profile >= CI_PROFILE_COUNT || CI_SLICES[profile] > p->slices) return NVML_ERROR_NOT_SUPPORTED;
    if (m->has_ci) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    m->has_ci = 1;
    m->ci_slices = CI_SLICES[profile];
    m->ci_id = 0;
    /* A new UUID for every new device, as the driver gives one. */
    unsigned long long hash = 1469598103934665603ULL;
    for (const char *c = m->parent->uuid; *c; c++) hash = (hash ^ (unsigned char)*c) * 1099511628211ULL;
    hash ^= ((unsigned long long)m->gi_id << 40) ^ ((unsigned long long)m->start << 32) ^ (unsigned long long)m->profile;
    FILE *ur = fopen("/proc/sys/kernel/random/uuid", "r");
    char rnd[40] = "00000000-0000-0000-0000-000000000000";
    if (ur) { if (!fgets(rnd, sizeof rnd, ur)) rnd[0] = '0'; fclose(ur); }
    rnd[strcspn(rnd, "\n")] = '\0';
    snprintf(m->uuid, sizeof m->uuid, "MIG-%08llx%s", hash & 0xffffffffULL, rnd + 8);
    *ci = &m->ci;
    return save_state();
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(void *h, unsigned int profile, void **instances, unsigned int *count) {
    NEED_HANDLE(m, h, KIND_GI);
    if (!instances || !count) return NVML_ERROR_INVALID_ARGUMENT;
    if (profile >= CI_PROFILE_COUNT) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = m->has_ci && m->ci_slices == CI_SLICES[profile];
    if (n > *count) return NVML_ERROR_INSUFFICIENT_SIZE;
    if (n) instances[0] = &m->ci;
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(void *h) {
    NEED_HANDLE(m, h, KIND_CI);
    m->has_ci = 0;
    m->ci_slices = 0;
    m->ci_id = 0;
    m->uuid[0] = '\0';
    return save_state();
}

/* Topology: nvmlGpuTopologyLevel_t. */
enum { TOPOLOGY_INTERNAL = 0, TOPOLOGY_NODE = 40, TOPOLOGY_SYSTEM = 50 };

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(void *h1, void *h2, unsigned int *path) {
    NEED_GPU(h1);
    NEED_GPU(h2);
    if (!path) return NVML_ERROR_INVALID_ARGUMENT;
    if (h1 == h2) *path = TOPOLOGY_INTERNAL;
    else *path = GPU(h1)->numa == GPU(h2)->numa ? TOPOLOGY_NODE : TOPOLOGY_SYSTEM;
    return NVML_SUCCESS;
}

/* NVLink is not simulated to NVML's callers (see the top of this file). */
nvmlReturn_t nvmlDeviceGetNvLinkState(void *h, unsigned int link, unsigned int *active) {
    NEED_GPU(h);
    (void)link;
    if (!active) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_ERROR_NOT_SUPPORTED;
}

/* Events: nvmlEventType* bits a data center GPU supports: single- and double-bit ECC errors, P-state
 * changes, critical Xid errors, clock changes. */
#define SUPPORTED_EVENTS 0x1fULL

typedef struct {
    void *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

struct fake_event_set {
    unsigned int kind;
    unsigned long long registered[MAX_GPUS];
};

static struct fake_event_set *event_set(void *set) {
    struct fake_event_set *es = set;
    return es && es->kind == KIND_EVENT_SET ? es : NULL;
}

nvmlReturn_t nvmlEventSetCreate(void **set) {
    NEED_INIT();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    struct fake_event_set *es = calloc(1, sizeof *es);
    if (!es) return NVML_ERROR_UNKNOWN;
    es->kind = KIND_EVENT_SET;
    *set = es;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(void *h, unsigned long long *types) {
    NEED_GPU(h);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(void *h, unsigned long long types, void *set) {
    NEED_GPU(h);
    struct fake_event_set *es = event_set(set);
    if (!es) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    es->registered[GPU(h) - gpus] |= types;
    return NVML_SUCCESS;
}

/* The lab's GPUs raise no events: every wait lasts its timeout and times out. */
nvmlReturn_t nvmlEventSetWait_v2(void *set, nvmlEventData_t *data, unsigned int timeoutms) {
    NEED_INIT();
    if (!event_set(set) || !data) return NVML_ERROR_INVALID_ARGUMENT;
    struct timespec left = {timeoutms / 1000, (long)(timeoutms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) continue;  /* a signal cut it short: sleep the rest */
    return NVML_ERROR_TIMEOUT;
}
nvmlReturn_t nvmlEventSetWait(void *set, nvmlEventData_t *data, unsigned int timeoutms) { return nvmlEventSetWait_v2(set, data, timeoutms); }

nvmlReturn_t nvmlEventSetFree(void *set) {
    NEED_INIT();
    struct fake_event_set *es = event_set(set);
    if (!es) return NVML_ERROR_INVALID_ARGUMENT;
    es->kind = 0;
    free(es);
    return NVML_SUCCESS;
}
