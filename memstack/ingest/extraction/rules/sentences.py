"""Reading a message before any rule runs: sentences, questions, turn words, and the
stretches that are not the user's own statements.

A rule only sees what the user asserts about themselves. Quoted or pasted words, reported
speech ("my boss keeps saying ..."), hypotheticals ("如果中了大奖 ...") and clauses
whose subject is someone else ("my wife hates ...") are masked or flagged here, so every
rule inherits the same judgement instead of re-implementing it.
"""

from __future__ import annotations

import re

from memstack.ingest.extraction.rules.lexicon import KIN_EN, KIN_ZH, OTHERS_EN, OTHERS_ZH

# Stands in for masked text: no rule takes it as a value, and it keeps clauses apart.
MASK = "〔〕"

# --- sentences, turn words, questions ----------------------------------------------------

TURN_WORDS = re.compile(
    r"其实|不过|改一下|改成|改为|改到|还是|算了|换成|更正|说错了|打错了|写错了|不对|改主意|纠正一下"
    r"|想了想|转念一想|仔细想想|重新考虑"
    # "只喜欢X": only X from now on, so X replaces the list rather than joining it
    r"|只喜欢|只爱|(?i:\bonly (?:like|love|enjoy|want)\b)"
    # "I meant persian", "eh, not anymore": the earlier statement no longer stands
    r"|(?i:\bI meant\b|\bnot anymore\b|\bnot any more\b)"
    r"|(?i:\bactually\b|\binstead\b|\bchanged? my mind\b|\bon second thought\b"
    r"|\bscratch that\b|\bcorrection\b|\bmake (?:it|that)\b|\blet me correct\b|\bnever ?mind\b"
    r"|\bwait,? no\b|\bno,? wait\b|\bnah\b|\bnvm\b|\bhold on\b)"
)
# "也行", "也没关系" concede, they add nothing: "其实我更在乎口味，环境一般也行".
ADDITIVE = re.compile(
    # "一点也不喜欢" is emphasis ("not at all"), not "also".
    r"(?<!一点)(?<!一点儿)也(?!行|可以|没关系|无所谓|没事|罢|成|好)|还有|另外|还养"
    # "too loud", "too pricey" grade a word; "also"-too closes its clause ("sesame too").
    r"|(?i:\balso\b|\btoo\b(?!\s+(?!and\b|but\b|btw\b|lol\b|please\b)[a-z])|\bas well\b|\beither\b)"
)
_SENTENCE = re.compile(r"[^。！？!?；;\n]+?(?:[。！？!?；;]+|\.(?=\s|$)|\n|$)")
_QUESTION_START = re.compile(
    r"^(?:是否|能不能|可不可以|有没有|会不会|要不要|怎么|怎样|如何|为什么|为啥|哪)"
    r"|^(?i:what|how|why|when|where|which|who|do you|did you|can you|could you|should i"
    r"|is it|are there|any ideas)\b"
)


def has_turn_word(text: str) -> bool:
    return TURN_WORDS.search(text) is not None


def turn_at(sentence: str) -> int | None:
    m = TURN_WORDS.search(sentence)
    if m is None:
        return None
    if _TRAILING_TURN.fullmatch(m.group()) and not _INSTEAD_OF.match(sentence, m.end()):
        # "I prefer small towns instead": a trailing "instead" turns its own clause, which
        # it closes rather than opens; "tea instead of coffee" keeps it where it is.
        return max(s for s in clause_starts(sentence) if s <= m.start())
    return m.start()


_TRAILING_TURN = re.compile(r"(?i:instead)")
_INSTEAD_OF = re.compile(r"(?i:\s+of\b)")


def split_sentences(text: str) -> list[str]:
    """Sentences with their end punctuation kept (questions are told apart by it)."""
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip(" \t\n。！？!?；;.")]


def is_question(sentence: str) -> bool:
    s = sentence.strip()
    if s.endswith(("?", "？")):
        return True
    body = s.rstrip("。.!！~～ ")
    if body.endswith(("吗", "呢", "么")):
        return True
    return not s.endswith(("。", ".", "!", "！")) and _QUESTION_START.search(body) is not None


def question_at(sentence: str) -> int | None:
    """Where the question in ``sentence`` starts: at its last clause ("my birthday's on
    March 3rd, any ideas?" states a birthday first), or at 0 when it opens as a question."""
    if not is_question(sentence):
        return None
    if _QUESTION_START.search(sentence.strip()):
        return 0
    starts = [m.end() for m in re.finditer(r"[，,；;]", sentence.rstrip(" ?？"))]
    return starts[-1] if starts else 0


# Chat spellings of "I", "I'm", "don't"...: the rules are written for the standard forms.
_CHAT_SPELLINGS = {
    "i": "I",
    "im": "I'm",
    "ive": "I've",
    "dont": "don't",
    "cant": "can't",
    "doesnt": "doesn't",
    "didnt": "didn't",
    "isnt": "isn't",
    "wont": "won't",
    # Cue words people often misspell in chat; the rules match the standard spelling.
    "alergic": "allergic",
    "alergy": "allergy",
    "alergies": "allergies",
    "allergys": "allergies",
    "vegitarian": "vegetarian",
    "vegeterian": "vegetarian",
    "lookign": "looking",
    "loking": "looking",
    "huntng": "hunting",
    "shoping": "shopping",
    "recomend": "recommend",
    "reccomend": "recommend",
    "recommed": "recommend",
}
_CHAT_WORD = re.compile(r"\b(?:" + "|".join(_CHAT_SPELLINGS) + r")\b", re.IGNORECASE)


# An emoji between Chinese words ends a clause as a comma does: "不用减😂 现在改成…".
_EMOJI_GAP_ZH = re.compile(
    r"(?<=[\u4e00-\u9fff])\s*[\U0001F300-\U0001FAFF\u2600-\u27BF]+\uFE0F?\s*(?=[\u4e00-\u9fff])"
)


_EYE_ROLL = re.compile(r"[\U0001F644\U0001F612\U0001F643\U0001F611]+\uFE0F?")


def tidy_chat(text: str) -> str:
    """Typographic apostrophes made plain and chat spellings made standard ("im" → "I'm")."""
    text = re.sub(r"(?<=[A-Za-z])[’‘](?=[A-Za-z])", "'", text)
    # An eye-roll is chat's "/s", and ends what it mocks: spelt so, it outlives the emoji
    # rules below, and what follows it is a sentence of its own.
    text = _EYE_ROLL.sub(" /s. ", text)
    # A dash between words of a Latin sentence separates clauses as a comma does.
    text = re.sub(r"(?<=[A-Za-z0-9])\s+[—–-]{1,2}\s+(?=[A-Za-z])", ", ", text)
    # An emoji between words of a Latin sentence ends a clause: "Rahul here 👋 data analyst".
    text = _EMOJI_GAP.sub(", ", text)
    text = _EMOJI_GAP_ZH.sub("，", text)
    return _CHAT_WORD.sub(lambda m: _CHAT_SPELLINGS[m.group().casefold()], text)


_EMOJI_GAP = re.compile(
    r"(?<=[A-Za-z0-9])\s*[\U0001F300-\U0001FAFF\u2600-\u27BF]+(?:\s*[\U0001F300-\U0001FAFF"
    r"\u2600-\u27BF\uFE0F])*\s+(?=[A-Za-z])"
)


# --- words that are not the user's -----------------------------------------------------------

_QUOTED = re.compile(
    r'"(?P<a>[^"\n]{1,400})"|“(?P<b>[^”\n]{1,400})”|「(?P<c>[^」\n]{1,400})」'
    r"|『(?P<d>[^』\n]{1,400})』|‘(?P<e>[^’\n]{1,400})’"
    # 'plain single quotes', told apart from apostrophes by what stands around them
    # (an apostrophe inside a word, "I'd", does not close one)
    r"|(?<![A-Za-z])'(?P<f>(?:[^'\n]|(?<=[A-Za-z])'(?=[A-Za-z])){1,400}?)'(?![A-Za-z])"
)
# A speaker label inside a quote ("Assistant: ...", "AI：...") marks pasted chat text, however
# short: the user is showing what was said to them, not saying it.
_SPEAKER_LABEL = re.compile(r"(?i:(?:assistant|AI|chatbot|bot|ChatGPT)\s*[:：])|助手[:：]|AI[:：]")
# Hearsay: the whole sentence is somebody else's claim.
_HEARSAY = re.compile(r"据说|听说|网上说|(?i:\baccording to\b|\bapparently\b|\bthey say\b)")
_SENTENCE_END = re.compile(r"[。！？!?\n]|\.(?=\s|$)")
_SPEAKER_WORDS = re.compile(
    r"[我你您咱]|(?i:\b(?:i|i'm|i'd|i've|me|my|mine|you|your|you're|we|our|us)\b)"
)
# Something said, written or pasted by someone else, introduced with a colon.
_REPORTED_COLON = re.compile(
    # (idioms built on 说 introduce the user's own story: "说来话长：", "说实话：")
    r"(?:(?<!我)(?:说(?!来话长|实话|真的|白了|起来|(?:一)?下(?:我|自己))|讲|写)|回复|回答|建议|如下|以下是|原话|写着|显示"
    r"|(?i:\bsaid|\bsays|\bsaying|\bwrote|\bwrites|\breplied|\banswered|\bsuggested"
    r"|\brecommended|\bpast(?:e|ed|ing)|\bcop(?:y|ied|ying)|\bquote|\breads|\bstates"
    r"|\byour\s+(?:last\s+|previous\s+|earlier\s+)?(?:answer|reply|response|message)))"
    r"[^:：\n]{0,40}?[:：]"
)
# "他说 / X跟我说 / my boss keeps saying ...": the rest of the clause is their words.
_REPORTED_ZH = re.compile(
    rf"(?:跟我|和我|对我|同我)(?:说|讲)|告诉我|(?:{OTHERS_ZH}|{KIN_ZH}|AI|助手|网上)(?:们)?"
    r"(?:也|一直|总|老|还|都|又|就)?(?:说|讲|觉得|认为|建议)"
)
_REPORTED_EN = re.compile(
    r"(?i:\b(?:keeps?\s+|kept\s+|always\s+|just\s+|was\s+|were\s+|is\s+|are\s+)?"
    r"(?:says|said|saying|tells me|told me|thinks|thought|claims|claimed|reckons|wrote"
    r"|writes|insists|insisted)\b)"
)
_NOT_REPORTING = re.compile(r"(?i:\b(?:I|we)\s+(?:\w+\s+)?|\b(?:that|having|as)\s+)$")
_CLAUSE_END = re.compile(r"[，,；;。！？!?\n]|\.(?=\s|$)")

# "if I won 40k ...", "如果中了大奖 ...": from the marker to the end of the sentence.
_HYPOTHETICAL = re.compile(
    r"如果|(?<![主只需重想])要是|假如|假设|倘若|若是|万一|哪天|等我|要不是|梦想|幻想|做梦|但愿"
    r"|(?i:\bif\b|\bwhat if\b|\bsuppose\b|\bsupposing\b|\bimagine\b|\bassuming\b|\bwish\b"
    r"|\bsomeday\b|\bone day\b|\bdream(?:ing)? (?:of|about)\b|\bwould've\b|\bwould have\b"
    # "Say I moved to X, would I ...": a supposition ("let's say 500" is a budget, not this)
    r"|(?:^|(?<=[,.;]\s))say,?\s+(?:I|we)\b)"
)
_HYPOTHETICAL_END = re.compile(
    r"(?:就好了|就好啦|该多好|多好)[啊呀啦]?[，,。！!]?"
    r"|[，,]\s*(?=可惜|但是|但|不过|可是|现在|现实是|实际上|目前|(?i:but\b|sadly\b|unfortunately\b"
    r"|realistically\b|in reality\b|for now\b))"
)
# Conditions that hedge a request rather than imagine a world: the statement stands.
_HEDGE = re.compile(
    r"(?:如果|要是)(?:可以|可能|方便|有的话|能的话)(?:的话)?"
    r"|(?i:\bif (?:possible|you can|you could|you don't mind|needed|necessary|that's "
    r"(?:ok|okay|fine|alright|possible)|that helps|it helps)\b)"
)


def _quote_is_a_statement(inner: str) -> bool:
    """A quoted product name ("Dune", “黑白灰”) is the user's word; a quoted sentence is
    somebody's speech, or text pasted from elsewhere."""
    if _SPEAKER_WORDS.search(inner) or _SPEAKER_LABEL.search(inner):
        return True
    cjk = len(re.findall(r"[\u4e00-\u9fff]", inner))
    return cjk > 4 or len(inner.split()) > 2


# Code and configuration are data, not statements: a fenced block, inline `code`, a
# JSON object, an assignment ("budget = 900", "LANG=fr_FR.UTF-8") or a block of two or
# more "key: value" lines (YAML, .env, INI, headers).
_FENCED = re.compile(r"```.*?(?:```|$)|~~~.*?(?:~~~|$)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]{1,400}`")
_JSON_OBJECT = re.compile(r"[{\[][^{}\[\]\n]{0,400}?[\"'][\w ]+[\"']\s*:[^{}\n]{0,400}?[}\]]")
_ASSIGNMENT = re.compile(r"(?<![\w$])[A-Za-z_][\w.\-\[\]]*\s*(?:==?|:=|=>)\s*[^\s,，。;；]+")
_KEY_LINE = r"[ \t]*[A-Za-z_][\w.\-]*[ \t]*[:=][ \t]*\S[^\n]*"
_KEY_BLOCK = re.compile(rf"(?m)^(?:{_KEY_LINE}\n){{1,}}{_KEY_LINE}$|^\[[\w .-]+\][ \t]*$")
# A quoted line (e-mail and chat quoting) and a forwarded message, to its end.
_QUOTE_LINE = re.compile(
    r"^[ \t]*>[^\n]*$"
    # a chat transcript pasted in: "[Mum]: …", "Dad: …", "<Tom> …"
    rf"|^[ \t]*(?:\[[^\]\n]{{1,30}}\]|<[^>\n]{{1,30}}>"
    rf"|(?i:{KIN_EN}|{OTHERS_EN})|(?:{KIN_ZH}|{OTHERS_ZH}))"
    r"[ \t]*[:：][^\n]*$",
    re.MULTILINE,
)
_FORWARDED = re.compile(
    r"(?i:-{2,}\s*forwarded message|\bfwd?\s*:|\bforwarding (?:this|you)\b"
    r"|\bforwarded\s+(?:from|message|text))"
    r"|【?转发】?[:：]|转自|以下是转发|(?m:^\s*(?:From|To|Subject|发件人|收件人|主题)\s*[:：])",
    re.MULTILINE,
)


def mask_code(text: str) -> str:
    """``text`` with code, configuration, quoted lines and forwarded messages replaced by
    :data:`MASK`: values in them (``budget = 900``, ``city: Paris``) are data someone
    typed or pasted, not the user telling about themselves."""
    for pattern in (_FENCED, _INLINE_CODE, _KEY_BLOCK, _JSON_OBJECT, _QUOTE_LINE):
        text = pattern.sub(MASK, text)
    forwarded = _FORWARDED.search(text)
    if forwarded is not None:
        # To the end, or to a blank line; a header over transcript lines (masked above)
        # hides only its own line, so what the user adds after them stays theirs.
        rest = text[forwarded.start() :]
        line_end = rest.find("\n")
        after = rest[line_end + 1 :] if line_end >= 0 else ""
        if after.startswith(MASK):
            text = text[: forwarded.start()] + MASK + "\n" + after
        else:
            blank = rest.find("\n\n")
            text = text[: forwarded.start()] + MASK + (rest[blank:] if blank >= 0 else "")
    return _ASSIGNMENT.sub(MASK, text)


def mask_others(text: str) -> str:
    """``text`` with every stretch that is somebody else's words replaced by :data:`MASK`:
    code and pasted data (:func:`mask_code`), statement-like quotes, text pasted after
    "X said:", and reported speech to the end of its clause."""
    text = mask_code(text)
    text = _QUOTED.sub(
        lambda m: MASK if _quote_is_a_statement(next(g for g in m.groups() if g)) else m[0],
        text,
    )
    for h in reversed(list(_HEARSAY.finditer(text))):
        end = _SENTENCE_END.search(text, h.end())
        text = text[: h.start()] + MASK + (text[end.start() :] if end else "")
    m = _REPORTED_COLON.search(text)
    if m:
        # Pasted text runs to the end of its line; after a bare colon-and-newline, to the end.
        rest = text[m.end() :]
        cut = len(rest) if rest.startswith("\n") else rest.find("\n")
        text = text[: m.end()] + MASK + (rest[cut:] if cut >= 0 else "")
    return _mask_reported(text)


def _mask_reported(text: str) -> str:
    out: list[str] = []
    pos = 0
    for pattern in (_REPORTED_ZH, _REPORTED_EN):
        for m in pattern.finditer(text):
            if m.start() < pos:
                continue
            before = text[: m.start()]
            if pattern is _REPORTED_EN and _NOT_REPORTING.search(before):
                continue  # "I said I'd rather ...", "that said, ...": no one else speaks
            end = _CLAUSE_END.search(text, m.end())
            stop = end.start() if end else len(text)
            out.append(text[pos : m.end()] + MASK)
            pos = stop
        text, out, pos = "".join(out) + text[pos:], [], 0
    return text


# Marks that the words mean the opposite: an eye-roll, "/s", "yeah right", "呵呵". What a
# sarcastic sentence seems to like or care about is not a preference.
_SARCASM = re.compile(
    r"[\U0001F644\U0001F612\U0001F643\U0001F611\U0001F921\U0001F971]|(?<!\w)/s\b|呵呵|我谢谢你|好棒棒"
    r"|(?i:\byeah,?\s+right\b|\bsaid\s+no\s+one\s+ever\b|\bnot!|\bjk\b|\bjust\s+kidding\b"
    r"|\b(?:oh|wow),?\s+(?:great|joy|fantastic|wonderful|lovely|perfect|fun)\b"
    r"|\bexactly\s+what\s+I\s+(?:always\s+)?(?:wanted|needed|dreamed)\b"
    r"|\bjust\s+what\s+I\s+needed\b|\bbecause\s+what\s+(?:I|my\s+life)\s+(?:need|is\s+missing))"
    r"|真是太?\S{1,6}了呢|可太\S{1,4}了\s*(?:/s|🙂)|真是[^，,。]{1,12}呢\s*(?:/s|[🙂☔😅])"
)
# A sentence that is only such a mark ("Not.", "🙄", "jk") turns the one before it.
_SARCASM_ALONE = re.compile(r"^\W*(?:(?i:not|jk|/s|lol\s+jk|kidding)|呵呵)\W*$")


def sarcastic(sentence: str, following: str = "") -> bool:
    """Whether ``sentence`` says the opposite of its words, or the short sentence after
    it does for it ("… preheat. best part of my day 🙄", "… in line. Not.")."""
    if _SARCASM.search(sentence) is not None or _SARCASM_ALONE.match(following) is not None:
        return True
    return len(following.split()) <= 8 and _SARCASM.search(following) is not None


def hypothetical_span(sentence: str) -> tuple[int, int] | None:
    """Where an imagined world starts and ends in ``sentence`` (None if it has none). It
    runs to the end of the sentence, unless a wish closes ("要是…就好了") or reality
    answers it ("…, but I love steak", "…，可惜只有六千")."""
    for m in _HYPOTHETICAL.finditer(sentence):
        if _HEDGE.match(sentence, m.start()) is None:
            end = _HYPOTHETICAL_END.search(sentence, m.end())
            return m.start(), end.end() if end else len(sentence)
    return None


# --- whose statement a clause is -------------------------------------------------------------

_LEAD_ZH = r"(?:(?:而且|但是|不过|可是|然后|另外|还有|对了|哈哈+|其实|那|就是)[，,]?)*"
_LEAD_EN = r"(?i:(?:(?:and|but|so|also|oh|well|lol|haha|plus|btw|then|though|like),?\s+)*)"
_OTHER_SUBJECT = re.compile(
    rf"^\s*{_LEAD_ZH}(?:(?:我|我们|咱)?(?:的|家的?)?(?:{KIN_ZH}|{OTHERS_ZH})(?!们?(?:和|跟)我)"
    rf"|(?:他|她|他们|她们|别人|人家)(?!们?(?:和|跟)我))"
    rf"|^\s*{_LEAD_EN}(?i:(?:my|our)\s+(?:\w+\s+)?(?:{KIN_EN}|{OTHERS_EN})(?:'s)?"
    r"|he|she|they|his|her|their)\b(?!(?:\s+[A-Z][a-z]+)?\s+and\s+(?:I|me)\b)"
)
_CLAUSE_BREAK = re.compile(
    r"[，,；;:：]|\s+(?i:but|so|and then|because|while|whereas)\s+|(?<=[^\s])\s+-\s+"
    # "my son has asthma and I'm allergic to cats": a new subject, a new clause
    r"|\s+and\s+(?=(?:I|I'm|I've|I'd|my)\b)"
)


def clause_starts(sentence: str) -> list[int]:
    """Where each clause of ``sentence`` starts, in order (the first at 0)."""
    return [0, *(m.end() for m in _CLAUSE_BREAK.finditer(sentence))]


def other_subject(clause: str) -> bool:
    """Whether ``clause`` is about someone else: it opens with another person as subject
    ("my husband loves sushi", "我女儿对牛奶过敏", "他住在广州"), not with the user or the
    user together with them ("my wife and I", "我和老公")."""
    return _OTHER_SUBJECT.search(clause) is not None
