/* Linked into every program of the sanitizer build (TANDEM_SANITIZE): shared objects are never
 * unloaded. OpenMPI dlopens its plugins (and libpmix through them) and closes them in
 * MPI_Finalize; a 32-byte allocation one of them keeps until exit is then reported by
 * LeakSanitizer from an unknown module, which no suppression can name unless the slow (DWARF)
 * unwinder walks past it into a library that is still loaded, and that unwinder makes every
 * malloc of a multi-rank test about 8x slower. Kept loaded, the allocating frame names its
 * library and scripts/lsan_suppressions.txt matches it with the fast unwinder. tandem's own
 * frames keep their frame pointers, so its leaks are still reported. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
