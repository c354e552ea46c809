/*
 * A GPU client that holds the device nodes but no GPU memory, like
 * nvidia-persistenced, nv-hostengine (DCGM) or dcgm-exporter: it opens
 * /dev/nvidiactl and every /dev/nvidiaN and waits. It never opens
 * /dev/nvidia-uvm, so NVML lists it in no process list.
 *
 * Compiled once per name (CLIENT_NAME), so that /proc/PID/exe and
 * /proc/PID/comm carry the real program's name. Arguments are accepted and
 * ignored, so unit files can use the real programs' command lines.
 * SIGTERM and SIGINT end it cleanly.
 */
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef CLIENT_NAME
#define CLIENT_NAME "gpu-client"
#endif

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv)
{
    struct sigaction sa;
    DIR *dev;
    struct dirent *ent;
    int held = 0;

    (void)argc;
    (void)argv;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    {
        /* NVML maps the control node, never a GPU node. */
        int ctl = open("/dev/nvidiactl", O_RDWR);
        if (ctl >= 0) {
            held++;
            if (mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, ctl, 0) == MAP_FAILED)
                fprintf(stderr, CLIENT_NAME ": could not map /dev/nvidiactl\n");
        }
    }
    dev = opendir("/dev");
    while (dev && (ent = readdir(dev))) {
        char path[300];
        if (strncmp(ent->d_name, "nvidia", 6) || !isdigit((unsigned char)ent->d_name[6]))
            continue;
        snprintf(path, sizeof(path), "/dev/%s", ent->d_name);
        if (open(path, O_RDWR) >= 0)
            held++;
    }
    if (dev)
        closedir(dev);
    fprintf(stderr, CLIENT_NAME ": holding %d NVIDIA device nodes\n", held);
    while (!stop)
        pause();
    fprintf(stderr, CLIENT_NAME ": stopping\n");
    return 0;
}
