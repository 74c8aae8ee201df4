/* The lab real node's smoke-test image (lab/nodebuild.py): lists the NVIDIA device nodes a container runtime put in
 * this container's /dev (through CDI on the lab's node) and fails when there are none. Static, no libraries: the
 * image holds this file alone. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    DIR *dev = opendir("/dev");
    struct dirent *entry;
    int found = 0;

    if (dev == NULL) {
        perror("/dev");
        return 2;
    }
    while ((entry = readdir(dev)) != NULL) {
        if (strncmp(entry->d_name, "nvidia", 6) == 0) {
            printf("/dev/%s\n", entry->d_name);
            found++;
        }
    }
    closedir(dev);
    if (found == 0) {
        fprintf(stderr, "no /dev/nvidia* in this container: no GPU was injected\n");
        return 1;
    }
    printf("%d NVIDIA device node(s) injected\n", found);
    return 0;
}
