"""IR mutation fuzzing of vyre-opt, and the corpus of bad inputs it found.

Each case deletes, duplicates or alters tokens (or lines, or numbers) of an
example file, vyre IR or its lowered form, and runs vyre-opt in-process with
a pipeline and a target. Every outcome must be either success (exit 0 with
output) or a diagnostic (exit 1 or 2, an `error:` line, no traceback and no
'internal compiler error'). Seeded: CI tries the same cases every run.

tests/corpus/*.mlir holds the inputs that once crashed the tools (each with
its arguments and the error it must now give) plus hand-written bad inputs.
"""

from __future__ import annotations

import contextlib
import io
import random
import re
from pathlib import Path

import pytest

import spirv_samples as samples
from vyre_xdsl.tools import vyre_opt

ROOT = Path(__file__).resolve().parent.parent
CORPUS = sorted((ROOT / "tests" / "corpus").glob("*.mlir"))
CASES_PER_SEED = 150
SEEDS = (1, 2, 3, 4)

TOKEN = re.compile(
    r'"[^"\n]*"|[%^@#][\w.$-]+|-?\d+\.\d+(?:e[+-]?\d+)?|-?\d+|[A-Za-z_][\w.$]*|->|\S')
NUMBER = re.compile(r"(?<![%\w.])\d+(?:\.\d+(?:e[+-]?\d+)?)?")
REPLACEMENTS = [
    "0", "-1", "1", "4294967295", "4294967296", "18446744073709551616", "1e40", "nan",
    "f32", "f64", "i32", "i1", "index", "memref<1xf32>", "memref<8xf32, 3 : i64>",
    "{", "}", "(", ")", ":", ",", "=", "<", ">", "[]", "%0", "%item", "^bb0", "@k",
    '"x"', "vyre.yield", "scf.yield", "arith.addf", "vyre.bounded_score", "gpu.barrier",
]
NUMBERS = ["0", "1", "2", "3", "7", "64", "65", "-1", "100000", "4294967295",
           "4294967296", "0.0", "1e40"]


def run_vyre_opt(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            vyre_opt.main(args)
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def check_outcome(code: int, out: str, err: str, what: str) -> None:
    assert "Traceback" not in err + out, f"{what}: traceback\n{err}"
    assert "internal compiler error" not in err, f"{what}: {err}"
    if code == 0:
        assert out, f"{what}: exit 0 without output"
    else:
        assert code in (1, 2), f"{what}: exit {code}\n{err}"
        assert "error:" in err, f"{what}: exit {code} without an error: line\n{err}"


# Characters a lexer chokes on without saying what (found by hand outside the
# project): each must give a located diagnostic naming it
HOSTILE = ["\u200b", "\u00a0", "\ufeff", "\u202e", "\u00e9", "\u0445", "\x00", "\x7f",
           "\u2028", "\U0001f600", "\t"]
INVISIBLE = ["\u200b", "\u00a0", "\ufeff", "\u202e", "\x00", "\x7f", "\u2028", "\u2066"]
SSA_DEF = re.compile(r"^(\s*)(%[\w.$-]+)(?::\d+)? = ", re.M)


def mutate(text: str, rng: random.Random) -> str:
    kind = rng.randrange(12)
    if kind == 8:  # a hostile character anywhere
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice(HOSTILE) + text[i:]
    if kind in (9, 10):  # break SSA order: move a definition after a use, or self-use
        lines = text.split("\n")
        defining = [i for i, line in enumerate(lines) if SSA_DEF.match(line)]
        if not defining:
            return text
        i = rng.choice(defining)
        if kind == 9 and i + 1 < len(lines):
            j = rng.randrange(i + 1, min(len(lines), i + 8))
            lines.insert(j, lines.pop(i))
        else:
            name = SSA_DEF.match(lines[i]).group(2)
            uses = list(re.finditer(r"%[\w.$-]+", lines[i]))[1:]
            if uses:
                use = rng.choice(uses)
                lines[i] = lines[i][:use.start()] + name + lines[i][use.end():]
        return "\n".join(lines)
    if kind == 11:  # truncate
        return text[: rng.randrange(len(text) + 1)]
    if kind == 0:  # delete or duplicate a line
        lines = text.split("\n")
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            del lines[i]
        else:
            lines.insert(i, lines[i])
        return "\n".join(lines)
    if kind in (1, 2):  # change a number
        spans = [m.span() for m in NUMBER.finditer(text)]
        s, e = rng.choice(spans)
        return text[:s] + rng.choice(NUMBERS) + text[e:]
    spans = [m.span() for m in TOKEN.finditer(text)]
    s, e = rng.choice(spans)
    if kind == 3:  # delete a token
        return text[:s] + text[e:]
    if kind == 4:  # duplicate a token
        return text[:s] + text[s:e] + " " + text[s:e] + text[e:]
    if kind == 5:  # replace a token by another token of the file
        s2, e2 = rng.choice(spans)
        return text[:s] + text[s2:e2] + text[e:]
    return text[:s] + rng.choice(REPLACEMENTS) + text[e:]


@pytest.fixture(scope="module")
def seeds_and_args(tmp_path_factory):
    """(text, [argument lists]) for each seed file: the two examples as vyre
    IR, their lowered forms and a hand-written lowered kernel."""
    tmp = tmp_path_factory.mktemp("lowered")
    inputs = []
    for example in ("flash_attention_2", "mla_decode"):
        path = ROOT / "examples" / f"{example}.mlir"
        code, lowered, err = run_vyre_opt([str(path), "-p", "vyre-to-gpu"])
        assert code == 0, err
        inputs.append((path.read_text(), [["-p", "vyre-to-gpu"],
                                          ["-p", "vyre-to-gpu", "-t", "spirv-asm"],
                                          [], ["-p", "vyre-inline-fragments"]]))
        inputs.append((lowered, [["-t", "spirv-asm"], []]))
    inputs.append((samples.BARRIER_EXCHANGE, [["-t", "spirv-asm"]]))
    return inputs, tmp


@pytest.mark.parametrize("seed", SEEDS)
def test_mutated_ir_gives_output_or_a_diagnostic(seed, seeds_and_args, fuzz_stats):
    inputs, tmp = seeds_and_args
    rng = random.Random(seed)
    path = tmp / f"mutant_{seed}.mlir"
    outcomes = {0: 0, 1: 0, 2: 0}
    for case in range(CASES_PER_SEED):
        text, arg_lists = rng.choice(inputs)
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            text = mutate(text, rng)
        args = rng.choice(arg_lists)
        path.write_text(text)
        code, out, err = run_vyre_opt([str(path), *args])
        outcomes[code] = outcomes.get(code, 0) + 1
        if code not in (0, 1, 2) or "Traceback" in err or "internal compiler error" in err:
            keep = tmp / f"failing_{seed}_{case}.mlir"
            keep.write_text(text)
            check_outcome(code, out, err, f"seed {seed} case {case} ({keep} {' '.join(args)})")
        check_outcome(code, out, err, f"seed {seed} case {case}")
    fuzz_stats["ir mutation: vyre-opt runs"] += CASES_PER_SEED
    fuzz_stats["(ir mutation: accepted)"] += outcomes[0]
    fuzz_stats["(ir mutation: diagnostics)"] += outcomes.get(1, 0) + outcomes.get(2, 0)


BAD_BYTES = [b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x80", b"\xed\xa0\x80", b"\xc0\xaf",
             b"\xef\xbb\xbf", b"\x80"]


@pytest.mark.parametrize("tool", ["vyre-opt", "vyre-run"])
def test_bad_bytes_give_a_located_diagnostic(tool, seeds_and_args, fuzz_stats):
    """Invalid UTF-8 (lone and truncated sequences, surrogates, overlong
    forms), byte-order marks and hostile characters at random places of the
    seed files: vyre-opt and vyre-run both print file:line:col: error:
    naming what is there, exit 1, never a traceback."""
    from test_errors import _vyre_run

    inputs, tmp = seeds_and_args
    rng = random.Random(f"bytes-{tool}")
    path = tmp / f"bytes_{tool}.mlir"
    for case in range(40):
        text, _ = rng.choice(inputs)
        data = text.encode()
        i = rng.randrange(len(data) + 1)
        while i < len(data) and data[i] & 0xC0 == 0x80:  # not inside a character
            i += 1
        if rng.random() < 0.5:
            bad = rng.choice(BAD_BYTES)
        else:  # invisible characters (comments may hold any character)
            line_start = data.rfind(b"\n", 0, i) + 1
            if b"//" in data[line_start:i]:
                i = line_start
            bad = rng.choice(INVISIBLE).encode()
        path.write_bytes(data[:i] + bad + data[i:])
        run = run_vyre_opt if tool == "vyre-opt" else _vyre_run
        code, out, err = run([str(path)])
        what = f"{tool} case {case}: {bad!r} at byte {i}"
        assert code == 1, f"{what}: exit {code}\n{err}"
        assert "Traceback" not in err and "internal" not in err, f"{what}\n{err}"
        first = err.strip().split("\n")[0]
        assert re.match(rf"{re.escape(str(path))}:\d+:\d+: error: ", first), f"{what}\n{err}"
        fuzz_stats[f"bad bytes: {tool} runs"] += 1


def _corpus_header(path: Path) -> tuple[list[str], str]:
    lines = path.read_text().split("\n")
    assert lines[0].startswith("// ARGS:") and lines[1].startswith("// ERROR:"), path
    return lines[0].removeprefix("// ARGS:").split(), lines[1].removeprefix("// ERROR:").strip()


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_input_gives_its_diagnostic(path, fuzz_stats):
    args, expected = _corpus_header(path)
    code, out, err = run_vyre_opt([str(path), *args])
    check_outcome(code, out, err, path.name)
    assert code == 1, f"{path.name}: exit {code}, expected 1\n{err}"
    first = err.strip().split("\n")[0]
    # located: file:line:col: error: (or at least file: error:)
    assert first.startswith(str(path)) and "error:" in first, first
    assert expected in err, f"{path.name}: expected {expected!r} in\n{err}"
    fuzz_stats["corpus: bad inputs replayed"] += 1


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_input_verify_diagnostics_mode(path):
    """Under --verify-diagnostics the same error is printed to stdout, exit 0."""
    args, expected = _corpus_header(path)
    code, out, err = run_vyre_opt([str(path), *args, "--verify-diagnostics"])
    assert "Traceback" not in out + err and "internal compiler error" not in out + err
    assert code == 0 and expected in out, (code, out, err)
