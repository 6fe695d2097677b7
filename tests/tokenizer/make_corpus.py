#!/usr/bin/env python3
"""make_corpus.py - the verification corpus of qtrain-data's tokenizer (tests/e2e/56_tokenizer.sh,
make bench-tokenizer): seeded, deterministic for a given checkout, JSON lines {"text": ...}.

  make_corpus.py OUT.jsonl [MEGABYTES (default 10)] [SEED (default 56)]

Each document mixes, at random, segments of: words of many scripts (CJK, Arabic with harakat,
Devanagari with vowel signs and virama, Thai with marks, Hangul syllables and conjoining jamo,
Cyrillic, Greek), Latin/Greek/Vietnamese text in NFD and with combining marks out of canonical
order, emoji (ZWJ families, skin tones, flags, VS16), excerpts of the repository's own C sources,
white-space runs (tabs, \\r\\n, trailing spaces, newline runs, NBSP, U+3000, U+2028, U+0085),
digit runs, English contractions in mixed case ('s 't 're 've 'm 'll 'd, also with U+017F),
added tokens inside text (whole and cut), and unusual code points (noncharacters, private use,
unassigned, U+FFFD, C0 and C1 controls, BOM, zero-width characters). Half the lines are written
with ensure_ascii (\\u escapes, astral code points as surrogate pairs).
Code points assigned after Unicode 14.0 are left out: the Rust engine's tables may predate them
(README, "Text to tokens")."""
import glob
import json
import os
import random
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rng_word(r, lo, hi, n):
    return "".join(chr(r.randint(lo, hi)) for _ in range(n))


def script_words(r):
    k = r.randrange(9)
    n = r.randint(1, 8)
    if k == 0:  # CJK, often without spaces, with CJK punctuation
        return "".join(rng_word(r, 0x4E00, 0x9FA5, r.randint(1, 12)) + r.choice(["，", "。", "、", "", "！"]) for _ in range(n))
    if k == 1:  # Arabic letters with harakat (marks)
        return " ".join("".join(chr(r.randint(0x0628, 0x064A)) + (chr(r.randint(0x064B, 0x0652)) if r.random() < 0.4 else "")
                                for _ in range(r.randint(2, 7))) for _ in range(n))
    if k == 2:  # Devanagari consonants, vowel signs, virama
        return " ".join("".join(chr(r.randint(0x0915, 0x0939)) + r.choice(["", chr(r.randint(0x093E, 0x094C)), "\u094d"])
                                for _ in range(r.randint(2, 6))) for _ in range(n)) + r.choice(["।", " ", "॥"])
    if k == 3:  # Thai with tone marks / vowels (marks)
        return "".join(chr(r.randint(0x0E01, 0x0E2E)) + r.choice(["", "\u0e31", "\u0e34", "\u0e48", "\u0e49", "\u0e35\u0e48"])
                       for _ in range(r.randint(3, 20)))
    if k == 4:  # Hangul syllables, sometimes decomposed into conjoining jamo (NFD)
        s = " ".join(rng_word(r, 0xAC00, 0xD7A3, r.randint(1, 5)) for _ in range(n))
        return unicodedata.normalize("NFD", s) if r.random() < 0.4 else s
    if k == 5:
        return " ".join(rng_word(r, 0x0430, 0x044F, r.randint(2, 9)).capitalize() for _ in range(n))
    if k == 6:
        s = " ".join(rng_word(r, 0x03B1, 0x03C9, r.randint(2, 9)) for _ in range(n))
        return unicodedata.normalize("NFD", "ά ή " + s + " ΐ ώ")
    if k == 7:  # Latin with accents in NFD, Vietnamese stacks, marks out of canonical order
        s = r.choice(["café naïve résumé", "Tiếng Việt có dấu: người, được, những", "Ångström Øre Œuvre ǅ", "ḍ̇ ṩ q̣̇"])
        s = unicodedata.normalize(r.choice(["NFD", "NFC", "NFKD"]), s)
        return s + " a\u0302\u0323 a\u0323\u0302 e\u0301\u0327 o\u031b\u0301 x\u0301\u0301 \u0301start"
    return " ".join(rng_word(r, 0x0561, 0x0586, r.randint(2, 8)) for _ in range(n))  # Armenian


EMOJI = ["😀", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "🏳\ufe0f\u200d🌈", "🇫🇷", "🇯🇵🇩🇪", "❤\ufe0f", "👩🏿\u200d💻", "🤷‍♀️", "1\ufe0f\u20e3", "✊🏻✊🏼"]
WS = [" ", "  ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "   \n  ", "\u00a0", "\u3000", "\u2028",
      "\u2029", "\u0085", "\u000b", "\u000c", " \t \n", "    "]
CONTR = ["it's", "IT'S", "don't", "DON'T", "we're", "We'Re", "they've", "I'm", "I'M", "you'll", "YOU'LL", "he'd", "she'D",
         "'s", "'ll've", "o'clock", "rock'n'roll", "it\u017fs", "it'\u017f", "'\u017ft", "''s", " 's", "'S", "'x"]
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "<|fim_prefix|>",
         "<|im_", "<|endoftext|", "<<|im_end|>>", "<|im_start|><|im_end|>", " <|im_start|> ", "<|vision_pad|>x"]
ODD = ["\ufdd0", "\ufdef", "\ufffe", "\uffff", "\U0001fffe", "\U0010ffff", "\ue000", "\uf8ff", "\U000f0000", "\U0010fffd",
       "\u0378", "\u0379", "\u0380", "\u038b", "\ufff0", "\U000e0080", "\ufffd", "\x00", "\x01", "\x1b", "\x1c", "\x1f", "\x7f",
       "\x80", "\x85", "\x9f", "\ufeff", "\u200b", "\u200c", "\u200d", "\u2060", "\u00ad", "\u0300", "\u20dd", "\U000e0041"]


def code_lines():
    lines = []
    for p in sorted(glob.glob(os.path.join(ROOT, "firmware", "*", "*.c")))[:60]:
        with open(p, encoding="utf-8") as f:
            lines.extend(f.read().split("\n"))
    return lines or ["int main(void) { return 0; }"]


def segment(r, code):
    k = r.randrange(12)
    if k <= 2:
        return script_words(r)
    if k == 3:
        return "".join(r.choice(EMOJI) for _ in range(r.randint(1, 4)))
    if k == 4:
        i = r.randrange(len(code))
        return "\n".join(code[i:i + r.randint(1, 30)])
    if k == 5:
        return r.choice(WS) * r.randint(1, 3)
    if k == 6:
        return r.choice(["", " ", "x", "v", "$"]) + "".join(r.choice("0123456789") for _ in range(r.randint(1, 25))) + \
            r.choice(["", ".5", ",000", "th", "%", "½", "²", "٣٤", "४२", "Ⅻ"])
    if k == 7:
        return " ".join(r.choice(CONTR) for _ in range(r.randint(1, 5)))
    if k == 8:
        return r.choice(ADDED)
    if k == 9:
        return "".join(r.choice(ODD) for _ in range(r.randint(1, 3)))
    words = ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "HTTP", "tokenizer", "qtrain",
             "Hello", "world", "a", "I", "e.g.", "(parenthesised)", "[1]", "--flag", "snake_case", "CamelCase", "ünïcödé"]
    return " ".join(r.choice(words) for _ in range(r.randint(3, 40))) + r.choice([".", "!", "?", ",", ":", ";", "...", ""])


def main():
    out = sys.argv[1]
    target = int(float(sys.argv[2]) * 1e6) if len(sys.argv) > 2 else 10 * 10**6
    r = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 56)
    code = code_lines()
    size = 0
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        while size < target:
            parts = []
            for _ in range(r.randint(1, 120)):
                parts.append(segment(r, code))
                parts.append(r.choice([" ", " ", " ", "", "\n", "\n\n", "\t", " \n"]))
            line = json.dumps({"id": size, "text": "".join(parts)}, ensure_ascii=r.random() < 0.5) + "\n"
            f.write(line)
            size += len(line.encode("utf-8"))


if __name__ == "__main__":
    main()
