/* arena_unload.c - host tool run after linking qtrain: takes the arena out of the segments
 * the kernel maps at exec, so the runtime maps it itself (firmware/runtime/arena.c).
 *
 * Why: a PT_LOAD segment that cannot be mapped at exec (RLIMIT_AS / `ulimit -v` below the
 * arena, or an arena beyond what the kernel will commit) kills the process with a bare
 * SIGSEGV before main runs, so no message can ever be printed. With the arena's segment
 * turned into PT_NULL, exec maps only the image; qt_arena_init then checks the arena size
 * against RLIMIT_AS and MemAvailable and maps the section's address range itself
 * (MAP_FIXED_NOREPLACE), reporting any failure as a message. linker/arena.ld leaves a 16 GiB
 * gap before the section so the brk heap, which starts after the image (at a random offset
 * of up to 1 GiB), never grows into that range.
 *
 * For a position-independent executable the kernel aligns the load address to the largest
 * p_align of its PT_LOAD segments; the arena's 2 MiB alignment is kept by raising the
 * first PT_LOAD's p_align (virtual address and file offset 0, so any power of two is
 * consistent) to the arena segment's.
 *
 * Usage: arena_unload FILE. Invariants: only an ELF64 little-endian file is touched; only
 * a PT_LOAD whose range is exactly the .qt_arena section (NOBITS, no file bytes) is changed,
 * and only its p_type, plus the first PT_LOAD's p_align when it starts at address and offset
 * 0 (PIE); a file without a non-empty .qt_arena section, or one already
 * processed, is left as it is (exit 0). Any other mismatch is an error (exit 1) that
 * names the file and leaves it unchanged.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define QT_AU_MAX_SECTIONS 256
#define QT_AU_MAX_PHDRS 64

static int qt_au_fail(const char *path, const char *what)
{
    fprintf(stderr, "arena_unload: %s: %s\n", path, what);
    return 1;
}

static int qt_au_read(int fd, void *buf, size_t n, off_t at)
{
    return pread(fd, buf, n, at) == (ssize_t)n ? 0 : -1;
}

int main(int argc, char **argv)
{
    static Elf64_Shdr sh[QT_AU_MAX_SECTIONS];
    static Elf64_Phdr ph[QT_AU_MAX_PHDRS];
    static char names[1 << 16];
    if (argc != 2) {
        fprintf(stderr, "usage: arena_unload FILE\n");
        return 2;
    }
    const char *path = argv[1];
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "arena_unload: %s: cannot open: %s\n", path, strerror(errno));
        return 1;
    }
    Elf64_Ehdr eh;
    int rc = 0;
    if (qt_au_read(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
        rc = qt_au_fail(path, "not an ELF64 little-endian file");
    else if (eh.e_shnum > QT_AU_MAX_SECTIONS || eh.e_phnum > QT_AU_MAX_PHDRS ||
             eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
             eh.e_shstrndx >= eh.e_shnum)
        rc = qt_au_fail(path, "unexpected section or program header table");
    else if (qt_au_read(fd, sh, eh.e_shnum * sizeof *sh, (off_t)eh.e_shoff) ||
             qt_au_read(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff))
        rc = qt_au_fail(path, "cannot read the header tables");
    if (rc) {
        close(fd);
        return rc;
    }
    const Elf64_Shdr *strs = &sh[eh.e_shstrndx];
    size_t nl = strs->sh_size < sizeof names - 1 ? strs->sh_size : sizeof names - 1;
    if (qt_au_read(fd, names, nl, (off_t)strs->sh_offset)) {
        close(fd);
        return qt_au_fail(path, "cannot read the section names");
    }
    names[nl] = 0;
    const Elf64_Shdr *arena = NULL;
    for (int i = 0; i < eh.e_shnum; i++)
        if (sh[i].sh_name < nl && !strcmp(names + sh[i].sh_name, ".qt_arena"))
            arena = &sh[i];
    if (!arena || arena->sh_size == 0) {   /* no plan linked in: nothing to do */
        close(fd);
        return 0;
    }
    if (arena->sh_type != SHT_NOBITS) {
        close(fd);
        return qt_au_fail(path, ".qt_arena is not a NOBITS section (linker/arena.ld)");
    }
    int hit = -1;
    for (int i = 0; i < eh.e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD) continue;
        int overlaps = ph[i].p_vaddr < arena->sh_addr + arena->sh_size &&
                       arena->sh_addr < ph[i].p_vaddr + ph[i].p_memsz;
        if (!overlaps) continue;
        if (ph[i].p_vaddr != arena->sh_addr || ph[i].p_memsz != arena->sh_size ||
            ph[i].p_filesz != 0) {
            close(fd);
            return qt_au_fail(path, "the segment holding .qt_arena holds other data too "
                              "(linker/arena.ld must give it a segment of its own)");
        }
        hit = i;
    }
    if (hit >= 0) {
        ph[hit].p_type = PT_NULL;
        if (eh.e_type == ET_DYN) {
            int first = -1;
            for (int i = 0; i < eh.e_phnum && first < 0; i++)
                if (ph[i].p_type == PT_LOAD) first = i;
            if (first < 0 || ph[first].p_vaddr != 0 || ph[first].p_offset != 0) {
                close(fd);
                return qt_au_fail(path, "position-independent, but its first PT_LOAD does not "
                                  "start at address and offset 0");
            }
            if (ph[first].p_align < ph[hit].p_align) ph[first].p_align = ph[hit].p_align;
        }
        if (pwrite(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff) !=
            (ssize_t)(eh.e_phnum * sizeof *ph))
            rc = qt_au_fail(path, "cannot write the program headers");
    }
    if (close(fd) != 0 && !rc)
        rc = qt_au_fail(path, "close failed");
    return rc;
}
