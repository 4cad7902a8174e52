/* A C program linked against the static library that calls nothing but chorusGetBuildInfo: the
 * algorithm table (src/algo/table.cc, which nothing it calls refers to) must still be in it,
 * kept by the build's link option (CMakeLists.txt chorus_static). Exits 0 when the build info
 * lists the algorithms, 1 (saying what it read) otherwise. */
#include <stdio.h>
#include <string.h>

#include "chorus/chorus.h"

int main(void) {
  const char* info = chorusGetBuildInfo();
  const char* line = info ? strstr(info, "algorithms=") : NULL;
  if (line == NULL || strncmp(line, "algorithms=ring,", 16) != 0) {
    printf("static link lost the algorithm table; build info:\n%s\n", info ? info : "(null)");
    return 1;
  }
  printf("%.*s\n", (int)strcspn(line, "\n"), line);
  return 0;
}
