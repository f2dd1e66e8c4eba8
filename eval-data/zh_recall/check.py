"""Validate zh_recall files: LoCoMo shape, dates, dia_ids, evidence, category quotas,
and that every paraphrase question shares no content word (jieba) and no content CJK
bigram with its evidence. Usage: check.py FILE.json [FILE.json ...]; exits 1 on any
violation."""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import jieba

CATEGORIES = ("literal", "paraphrase", "cross-language", "changed")
# Minimum share of a file's questions per category.
QUOTAS = {"paraphrase": 0.50, "cross-language": 0.15, "changed": 0.10}
# Minimum questions per file, by a word in the file name (default: the last).
MIN_QUESTIONS = {"dev": 60, "holdout": 30, "": 30}
MIN_SESSIONS, MIN_TURNS, MAX_TURNS = 8, 8, 16
DATE_FMT = "%I:%M %p on %d %B, %Y"
STOPWORDS = set(
    "的 了 是 在 有 和 我 她 他 什么 哪 吗 呢 吧 啊 过 也 都 就 还 这 那 个 一 不 没 多少 几 "
    "怎么 为什么 谁 哪里 时候 最近 现在 之前 以前 "
    # further function words: pronouns, particles, prepositions, measure words
    "你 它 们 着 得 地 把 被 给 对 从 到 让 又 很 与 跟 为 呀 哦 嗯 么 之 只 种 位 次".split()
)
STOP_CHARS = {w for w in STOPWORDS if len(w) == 1}
CJK = re.compile(r"[\u4e00-\u9fff]+")
DIA = re.compile(r"D(\d+):(\d+)")

jieba.setLogLevel(60)


def content_words(text: str, name: str) -> set[str]:
    text = text.replace(name, " ")
    return {w for w in jieba.lcut(text) if CJK.fullmatch(w) and w not in STOPWORDS}


def content_bigrams(text: str, name: str) -> set[str]:
    out: set[str] = set()
    for run in CJK.findall(text.replace(name, " ")):
        for a, b in itertools.pairwise(run):
            pair = a + b
            if a in STOP_CHARS or b in STOP_CHARS or any(pair in w for w in STOPWORDS):
                continue
            out.add(pair)
    return out


def check_sample(s: dict[str, Any], errs: list[str]) -> tuple[str, Counter[str]]:
    sid = s.get("sample_id", "?")
    where = f"[{sid}]"
    conv, qa = s.get("conversation"), s.get("qa")
    if not isinstance(sid, str) or not isinstance(conv, dict) or not isinstance(qa, list):
        errs.append(f"{where} needs sample_id (str), conversation (dict), qa (list)")
        return "", Counter()
    a, b = conv.get("speaker_a"), conv.get("speaker_b")
    if not (isinstance(a, str) and isinstance(b, str) and a != b):
        errs.append(f"{where} speaker_a/speaker_b missing or equal")
        return "", Counter()
    nums = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
    if nums != list(range(1, len(nums) + 1)) or len(nums) < MIN_SESSIONS:
        errs.append(f"{where} sessions must be 1..N with N >= {MIN_SESSIONS}: {nums}")
    turns: dict[str, tuple[int, str, str]] = {}  # dia_id -> (session, speaker, text)
    last: datetime | None = None
    for n in nums:
        try:
            when = datetime.strptime(conv[f"session_{n}_date_time"], DATE_FMT)
        except (KeyError, ValueError) as e:
            errs.append(f"{where} session_{n}_date_time: {e}")
            continue
        if last is not None and when <= last:
            errs.append(f"{where} session_{n} date does not increase")
        last = when
        rows = conv[f"session_{n}"]
        if not MIN_TURNS <= len(rows) <= MAX_TURNS:
            errs.append(f"{where} session_{n} has {len(rows)} turns")
        for k, t in enumerate(rows, 1):
            dia, spk, text = t.get("dia_id"), t.get("speaker"), t.get("text")
            if dia != f"D{n}:{k}" or dia in turns:
                errs.append(f"{where} bad or duplicate dia_id {dia!r} (expected D{n}:{k})")
            if spk != (a if k % 2 else b):
                errs.append(f"{where} {dia}: speakers must alternate, user first")
            if not isinstance(text, str) or not text.strip():
                errs.append(f"{where} {dia}: empty text")
            turns[str(dia)] = (n, str(spk), str(text))
    cats: Counter[str] = Counter()
    for i, q in enumerate(qa):
        qw = f"{where} qa[{i}]"
        text, cat, ev = q.get("question"), q.get("category"), q.get("evidence")
        if not isinstance(text, str) or not isinstance(q.get("answer"), str) or not text:
            errs.append(f"{qw} question and answer must be non-empty strings")
            continue
        if cat not in CATEGORIES:
            errs.append(f"{qw} category {cat!r} not one of {CATEGORIES}")
            continue
        cats[cat] += 1
        if not isinstance(ev, list) or not 1 <= len(ev) <= 2:
            errs.append(f"{qw} evidence must list 1-2 turns")
            continue
        if any(e not in turns or turns[e][1] != a for e in ev):
            errs.append(f"{qw} evidence {ev} missing or not {a}'s turns")
            continue
        if cat == "cross-language":
            if CJK.search(text) or not re.search(r"[A-Za-z]", text):
                errs.append(f"{qw} cross-language question must be English: {text}")
        else:
            if "我" in text or not (a in text or "她" in text or "他" in text):
                errs.append(f"{qw} must name {a} or use 她/他, never 我: {text}")
        qwords, qbis = content_words(text, a), content_bigrams(text, a)
        for ref in ev:
            etext = turns[ref][2]
            shared = qwords & content_words(etext, a)
            if cat == "paraphrase":
                bis = qbis & content_bigrams(etext, a)
                if shared or bis:
                    errs.append(f"{qw} paraphrase shares {sorted(shared | bis)} with {ref}: {text}")
            if cat == "literal" and not shared:
                errs.append(f"{qw} literal question shares no content word with {ref}")
        if cat == "changed":
            prev = q.get("previous_evidence")
            first = min(turns[e][0] for e in ev)
            if (
                not isinstance(prev, list)
                or not prev
                or any(p not in turns or turns[p][1] != a or turns[p][0] >= first for p in prev)
            ):
                errs.append(
                    f"{qw} changed needs previous_evidence: {a}'s turns in earlier sessions"
                )
    return a, cats


def check_file(path: Path, errs: list[str]) -> list[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        errs.append(f"{path}: {e}")
        return []
    if not isinstance(data, list) or not data:
        errs.append(f"{path}: top level must be a non-empty list of samples")
        return []
    local: list[str] = []
    users, total = [], Counter[str]()
    for s in data:
        user, cats = check_sample(s, local)
        users.append(user)
        total += cats
    n = sum(total.values())
    need = next(v for k, v in MIN_QUESTIONS.items() if k in path.name)
    if n < need:
        local.append(f"{n} questions, need >= {need}")
    for cat, share in QUOTAS.items():
        if total[cat] < share * n:
            local.append(f"{cat}: {total[cat]}/{n} < {share:.0%}")
    counts = ", ".join(f"{c} {total[c]}" for c in CATEGORIES)
    print(f"{path.name}: {len(data)} conversations, {n} questions ({counts})")
    errs.extend(f"{path.name}: {e}" for e in local)
    return users


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    errs: list[str] = []
    users: list[str] = []
    for arg in argv:
        users += check_file(Path(arg), errs)
    dup = [u for u, c in Counter(users).items() if u and c > 1]
    if dup:
        errs.append(f"the same user in more than one conversation: {dup}")
    for e in errs:
        print("ERROR", e)
    print("FAIL" if errs else "OK", f"({len(errs)} problems)")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
