#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu) into C++ that the CUDA emulator runs on the CPU.

Only the two constructs plain C++ cannot express are rewritten; every other line stays as it is
(the line numbers of the output are those of the input, and a #line directive names the input):
  kernel<<<grid, block, shared, stream>>>(args)
      -> ::cuda_emulator::launch(::cuda_emulator::LaunchConfig(grid, block, shared, stream),
                                 LIMIT, ADDRESS, "kernel", [](auto... a) { kernel(a...); },
                                 args)
         where LIMIT is the kernel's __launch_bounds__ (0 when it has none), so that a launch
         with more threads than the bound fails as it does on a GPU, and ADDRESS the kernel's
         address for the attributes set on it (null for a template whose arguments the call
         deduces: the lambda calls the kernel by name, so deduction works as nvcc's does);
  extern __shared__ T name[];  ->  T* name = ::cuda_emulator::dynamic_shared<T>();
  __shared__ T name[N][M];     ->  T (&name)[N][M] = ::cuda_emulator::static_shared<T[N][M], AT>();
      storage that every block finds full of garbage, whatever the previous block left there
      (AT: the declaration's offset in the file, so that no two declarations share storage);
a __shared__ in any other form stops the translation.

usage: translate_cu.py INPUT.cu OUTPUT.cc
"""
import re
import sys

SHARED = re.compile(r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([\w:]+)\s+(\w+)\s*\[\s*\]\s*;")
STATIC_SHARED = re.compile(r"__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([\w:]+)\s+(\w+)\s*"
                           r"((?:\[[^\[\];]+\]\s*)*);")
BOUNDS = re.compile(r"__launch_bounds__\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(\w+)\s*\(")


def fail(path, text, pos, what):
    line = text.count("\n", 0, pos) + 1
    sys.exit(f"{path}:{line}: translate_cu.py: {what}")


def matching(text, pos, open_ch, close_ch):
    """Index just past the bracket closing the one at text[pos] (parentheses and angle brackets
    of template arguments; good enough for launch sites, which hold no comparisons)."""
    depth = 0
    for i in range(pos, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def kernel_start(text, end):
    """Start of the kernel expression that ends at `end` (an identifier, possibly qualified, with
    template arguments)."""
    i = end
    while True:
        if i > 0 and text[i - 1] == ">":
            depth = 0
            while i > 0:
                i -= 1
                if text[i] == ">":
                    depth += 1
                elif text[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
            i -= 1
        return i


def translate(path, text):
    bounds = {m.group(2): m.group(1).strip() for m in BOUNDS.finditer(text)}
    templates = set(re.findall(r"template\s*<[^{;]*?>\s*__global__\s+void\s+"
                               r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(",
                               text))
    text = SHARED.sub(lambda m: f"{m.group(1)}* {m.group(2)} = ::cuda_emulator::dynamic_shared<{m.group(1)}>();", text)

    def static_shared(m):
        t, name, dims = m.group(1), m.group(2), re.sub(r"\s+", "", m.group(3))
        ref = f"(&{name}){dims}" if dims else f"&{name}"
        return f"{t} {ref} = ::cuda_emulator::static_shared<{t}{dims}, {m.start()}>();"

    text = STATIC_SHARED.sub(static_shared, text)
    for m in re.finditer(r"__shared__", text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if "//" not in text[line_start:m.start()]:  # a comment may name it
            fail(path, text, m.start(), "a __shared__ declaration of a form the emulator does not know")
    out, pos = [], 0
    while True:
        start = text.find("<<<", pos)
        if start < 0:
            out.append(text[pos:])
            break
        close = text.find(">>>", start)
        if close < 0:
            fail(path, text, start, "a <<< without >>>")
        config = text[start + 3:close]
        paren = close + 3
        while paren < len(text) and text[paren].isspace():
            paren += 1
        if paren >= len(text) or text[paren] != "(":
            fail(path, text, close, "no argument list after >>>")
        args_end = matching(text, paren, "(", ")")
        if args_end < 0:
            fail(path, text, paren, "unbalanced argument list")
        k0 = kernel_start(text, start)
        kernel = text[k0:start]
        name = re.sub(r"<.*", "", kernel).split("::")[-1]
        if not name:
            fail(path, text, start, "no kernel name before <<<")
        args = text[paren + 1:args_end - 1]
        limit = bounds.get(name, "0")
        sep = ", " if args.strip() else ""
        out.append(text[pos:k0])
        deduced = name in templates and "<" not in kernel
        address = "nullptr" if deduced else f"reinterpret_cast<const void*>(&{kernel})"
        out.append(f"::cuda_emulator::launch(::cuda_emulator::LaunchConfig({config}), ({limit}), "
                   f"{address}, \"{kernel}\", [](auto... a_) {{ {kernel}(a_...); }}{sep}{args})")
        pos = args_end
    return "".join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    result = f'#line 1 "{src}"\n' + translate(src, text)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(result)


if __name__ == "__main__":
    main()
