/* app_main.c — ESP-IDF entry point of golden_app: runs the golden harness
 * once and prints its verdict on the console (the harness prints every
 * stage table and a SUMMARY line before it). */
#include <stdio.h>

int af_golden_main(void);

void app_main(void) {
  const int failing = af_golden_main();
  printf("attnflow golden_app: %d failing case x path runs\n", failing);
}
