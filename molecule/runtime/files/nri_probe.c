/* The runtime scenario's NRI probe (issue 63): the one program of a one-layer image. With no arguments it waits for
 * SIGTERM (the pod sandbox's and the container's process); with `ls DIR` it lists DIR's entries, a character device as
 * "c MAJOR:MINOR NAME", anything else as "- NAME": what the container sees of the CDI devices the NRI plugin injected. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static void bye(int sig) {
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "ls") == 0) {
        DIR *dir = opendir(argv[2]);
        if (!dir) {
            perror(argv[2]);
            return 1;
        }
        struct dirent *entry;
        while ((entry = readdir(dir)) != NULL) {
            char path[4096];
            struct stat st;
            if (entry->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", argv[2], entry->d_name);
            if (lstat(path, &st) == 0 && S_ISCHR(st.st_mode))
                printf("c %u:%u %s\n", major(st.st_rdev), minor(st.st_rdev), entry->d_name);
            else
                printf("- %s\n", entry->d_name);
        }
        closedir(dir);
        return 0;
    }
    signal(SIGTERM, bye);
    signal(SIGINT, bye);
    for (;;)
        pause();
}
