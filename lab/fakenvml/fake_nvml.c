/*
 * The lab's simulated NVML: a libnvidia-ml.so.1 that answers from a hardware profile.
 *
 * Only the lab uses it, at the hardware boundary: gpu_info loads it through nvidia-ml-py exactly as
 * it loads the real library, so the module runs its real code path. It exports the entry points
 * gpu_info calls (and the older names older bindings call), with NVML's C signatures and struct
 * layouts. The answers come from "nvml.conf" in the directory this library was loaded from
 * (written by tests/lab/hardware.py from a profile), so no environment variable is needed.
 *
 * nvml.conf, one "key=value" a line:
 *   driver_loaded=1|0   (0: nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED, as on a node
 *                        whose kernel module is not loaded)
 *   driver_version=550.54.15  nvml_version=12.550.54.15  cuda_version=12040
 *   gpu=INDEX|UUID|NAME|BUS_ID|PCI_DEVICE_ID|SUBSYS_ID|MEMORY_MIB|CC_MAJOR|CC_MINOR|PERSISTENCE|MIG_CAPABLE|MIG_CURRENT|MIG_PENDING
 *   profile=GPU_INDEX|PROFILE|ID|SLICES|INSTANCES|SMS|CE|DEC|ENC|JPEG|OFA|MEMORY_MB|NAME
 *   mig=GPU_INDEX|SLOT|PROFILE|CI_SLICES|GI_ID|CI_ID|UUID
 *                       (a MIG device: a GPU instance of that profile, holding one compute
 *                        instance of CI_SLICES slices; SLOT is its MIG device index)
 *
 * "fabric", beside nvml.conf and read at every call, holds the NVLink fabric state of every GPU, as
 * nvmlDeviceGetGpuFabricInfo reports it: "STATE STATUS" (STATE not_started, in_progress or completed;
 * STATUS an nvmlReturn_t, 0 for success). Without the file the GPUs have no fabric (NOT_SUPPORTED). The
 * lab writes it from the profile, and its Fabric Manager stand-in moves it to "completed 0".
 *
 * Handles: a GPU handle points at its struct fake_gpu; a MIG device and its GPU instance are each a
 * struct handle inside the struct fake_mig, so every handle can say what it is and which device it
 * belongs to, and a handle of the wrong kind is refused.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 16
#define MAX_PROFILES 32
#define MAX_MIG 8

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

enum handle_kind { KIND_GPU = 0x67707521, KIND_MIG, KIND_GI };

struct fake_mig;
struct handle {
    unsigned int kind;
    struct fake_mig *mig;
};

struct fake_mig {
    int used;
    unsigned int profile, ci_slices, gi_id, ci_id;
    char uuid[96];
    struct fake_gpu *parent;
    struct handle device, gi;
};

struct fake_gpu {
    unsigned int kind;
    char uuid[96], name[96], bus_id[32];
    unsigned int pci_device_id, subsys_id, cc_major, cc_minor, persistence, mig_capable, mig_current, mig_pending;
    unsigned long long memory_mib;
    struct fake_profile profiles[MAX_PROFILES];
    struct fake_mig migs[MAX_MIG];
};

static struct fake_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static int driver_loaded = 1, initialised;
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
    char *f[13];
    if (split_fields(value, f, 13) != 13) return;
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
    if (i + 1 > gpu_count) gpu_count = i + 1;
}

static void parse_profile(char *value) {
    char *f[13];
    if (split_fields(value, f, 13) != 13) return;
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
}

static void parse_mig(char *value) {
    char *f[7];
    if (split_fields(value, f, 7) != 7) return;
    unsigned int gi = (unsigned int)atoi(f[0]), slot = (unsigned int)atoi(f[1]);
    if (gi >= MAX_GPUS || slot >= MAX_MIG) return;
    struct fake_mig *m = &gpus[gi].migs[slot];
    m->used = 1;
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
        }
    }
}

/* A file beside this library (nvml.conf, fabric). */
static FILE *open_beside(const char *name) {
    Dl_info info;
    char path[4096];
    if (!dladdr((void *)open_beside, &info) || !info.dli_fname) return NULL;
    copy_field(path, sizeof path, info.dli_fname);
    char *slash = strrchr(path, '/');
    if (slash) *(slash + 1) = '\0'; else path[0] = '\0';
    strncat(path, name, sizeof path - strlen(path) - 1);
    return fopen(path, "r");
}

static int load_profile(void) {
    FILE *fp = open_beside("nvml.conf");
    if (!fp) return -1;
    memset(gpus, 0, sizeof gpus);
    gpu_count = 0;
    char line[1024];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (!eq || line[0] == '#') continue;
        *eq = '\0';
        char *key = line, *value = eq + 1;
        if (!strcmp(key, "driver_loaded")) driver_loaded = atoi(value);
        else if (!strcmp(key, "driver_version")) copy_field(driver_version, sizeof driver_version, value);
        else if (!strcmp(key, "nvml_version")) copy_field(nvml_version, sizeof nvml_version, value);
        else if (!strcmp(key, "cuda_version")) cuda_version = atoi(value);
        else if (!strcmp(key, "gpu")) parse_gpu(value);
        else if (!strcmp(key, "profile")) parse_profile(value);
        else if (!strcmp(key, "mig")) parse_mig(value);
    }
    fclose(fp);
    link_handles();
    return 0;
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
    initialised = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlShutdown(void) { NEED_INIT(); initialised = 0; return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
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
    if (!GPU(h)->mig_current || !m->used) return NVML_ERROR_NOT_FOUND;
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
    info->placement.size = m->parent->profiles[m->profile].slices;
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
            if (gpus[i].migs[s].used && !strcmp(gpus[i].migs[s].uuid, uuid)) {
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
