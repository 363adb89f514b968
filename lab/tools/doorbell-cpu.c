/*
 * doorbell-cpu.so: an LD_PRELOAD shim for the lab benchmark. It measures the CPU time a process
 * spends inside write(2) calls on an RDMA uverbs device (/dev/infiniband/uverbs*).
 *
 * Why: Soft-RoCE (rdma_rxe) rings its send doorbell from ibv_post_send with one such write,
 * and the kernel then does the emulated NIC's send work (segmenting, CRC, transmit) inside
 * that call, charged to the posting thread. A hardware NIC does that work off the host CPU.
 * Measuring it the same way in every tool lets the benchmark compare the CPU each tool spends
 * on its own work. The time is the calling thread's CPU clock around the call
 * (CLOCK_THREAD_CPUTIME_ID), not wall time.
 *
 * At exit it appends "<cpu_seconds> <writes>" to the file named by DOORBELL_CPU_OUT.
 * Lab use only; not part of the exporter.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static ssize_t (*real_write)(int, const void *, size_t);
static dev_t uverbs_devs[64];
static int n_uverbs;
static uint64_t total_ns;
static uint64_t total_writes;

__attribute__((constructor)) static void doorbell_init(void) {
    real_write = (ssize_t (*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    glob_t g;
    if (glob("/dev/infiniband/uverbs*", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && n_uverbs < 64; i++) {
            struct stat st;
            if (stat(g.gl_pathv[i], &st) == 0 && S_ISCHR(st.st_mode))
                uverbs_devs[n_uverbs++] = st.st_rdev;
        }
        globfree(&g);
    }
}

static int is_uverbs(int fd) {
    struct stat st;
    if (n_uverbs == 0 || fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode))
        return 0;
    for (int i = 0; i < n_uverbs; i++)
        if (uverbs_devs[i] == st.st_rdev)
            return 1;
    return 0;
}

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

ssize_t write(int fd, const void *buf, size_t count) {
    if (!real_write)
        doorbell_init();
    if (!is_uverbs(fd))
        return real_write(fd, buf, count);
    uint64_t start = thread_cpu_ns();
    ssize_t ret = real_write(fd, buf, count);
    __atomic_add_fetch(&total_ns, thread_cpu_ns() - start, __ATOMIC_RELAXED);
    __atomic_add_fetch(&total_writes, 1, __ATOMIC_RELAXED);
    return ret;
}

__attribute__((destructor)) static void doorbell_report(void) {
    const char *path = getenv("DOORBELL_CPU_OUT");
    if (!path)
        return;
    char line[64];
    int n = snprintf(line, sizeof line, "%.6f %llu\n",
                     __atomic_load_n(&total_ns, __ATOMIC_RELAXED) / 1e9,
                     (unsigned long long)__atomic_load_n(&total_writes, __ATOMIC_RELAXED));
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        real_write(fd, line, (size_t)n);
        close(fd);
    }
}
