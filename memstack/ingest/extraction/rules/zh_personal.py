"""Chinese rules for the personal keys: diet, allergies, birthday, family, pets.

Kin terms and animals are closed classes (:mod:`.lexicon`); a name after them is read
with jieba ("我姐姐小雨"). A pet that died or was given away is withdrawn, not kept.
"""

from __future__ import annotations

import re

from memstack.ingest.extraction.rules.engine import Rule, rule
from memstack.ingest.extraction.rules.lexicon import (
    ANIMAL_HEADS_ZH,
    BREEDS_ZH,
    DIET_WORDS_ZH,
    DIETS_ZH,
    KIN_ZH,
    KIN_ZH_FULL,
)
from memstack.ingest.extraction.rules.zh_words import ADV, CJK, END, tags


def _diet(m: re.Match[str], sentence: str) -> str:
    return _diet_named(m.group("v"))


def _diet_named(word: str) -> str:
    return DIETS_ZH.get(word, word)


def _kin(word: str) -> str:
    return KIN_ZH_FULL.get(word, word)


# "家里有老公和两个儿子": a household listed item by item. Every item must be a relative
# ("家里有猫和狗" is pets, "家里有事" nothing), else the whole list is left alone.
_HOUSEHOLD_ITEM = re.compile(rf"(?P<n>一个|两个|三个|俩|一|两|三)?(?P<rel>{KIN_ZH})")


def _household(m: re.Match[str], sentence: str) -> list[str] | None:
    rest = re.split(r"[，,。；;！!？?～~]", sentence[m.end() :], maxsplit=1)[0]
    items = []
    for piece in re.split(r"和|跟|、|还有|以及", rest):
        hit = _HOUSEHOLD_ITEM.fullmatch(piece.strip())
        if hit is None:
            return None
        items.append((hit["n"] or "") + _kin(hit["rel"]))
    return items or None


# "我们家三口人：我、我先生，还有闺女小满": the members counted, then listed.
_MEMBER = re.compile(
    rf"^(?:还有|以及|和|跟)?(?:我的?|我家)?(?P<rel>{KIN_ZH})(?P<name>{CJK}{{1,3}})?$"
)


def _members(m: re.Match[str], sentence: str) -> list[str] | None:
    items = []
    for piece in re.split(r"[、，,；;]|和|还有|以及", sentence[m.end() :].split("。")[0]):
        piece = piece.strip(" ～~!！")
        if piece in ("", "我", "我自己", "本人"):
            continue
        hit = _MEMBER.match(piece)
        if hit is None or (hit["name"] or "").startswith("们"):
            break  # the list is over: "…，另外养了只猫"
        rel = _kin(hit["rel"])
        items.append(f"{rel}: {hit['name']}" if hit["name"] else rel)
    return items or None


def _family(m: re.Match[str], sentence: str) -> str:
    rel = _kin(m.group("rel"))
    name = m.groupdict().get("name")
    if not name:
        # "我姐姐小雨": a name right after the kin term, as jieba sees it.
        words = tags(sentence[m.end() : m.end() + 6])
        if words and words[0][1] in ("nr", "nrt", "nrfg") and 2 <= len(words[0][0]) <= 3:
            name = words[0][0]
    return f"{rel}: {name}" if name else rel


def _family_with(m: re.Match[str], sentence: str) -> list[str]:
    """Everyone the user does something with: "我和爸妈带着妹妹去厦门" → 爸妈, 妹妹."""
    clause = re.split(r"[，,。！？!?；;]", sentence[m.start() :], maxsplit=1)[0]
    runs = re.findall(rf"(?:和|跟|带着|带|陪着|陪|同)(?:我的?)?((?:{KIN_ZH})+)(?!们)", clause)
    # "带老婆孩子去清迈": kin terms side by side are several people.
    return [_kin(k) for run in runs for k in re.findall(KIN_ZH, run)]


def _count_family(m: re.Match[str], sentence: str) -> str:
    n = m.group("n") or m.group("n2") or m.group("n3") or ""
    rel = m.group("rel") or m.group("rel2") or m.group("rel3")
    return rel if n in ("一个", "一", "个", "") else f"{n}{rel}"


def _pet_item(count: str | None, classifier: str | None, animal: str, name: str | None) -> str:
    # "两只猫" keeps its count; "一只猫" is just 猫.
    if count and count != "一":
        animal = f"{count}{classifier or ''}{animal}"
    return f"{animal}: {name}" if name else animal


def _pet(m: re.Match[str], sentence: str) -> list[str]:
    """The animal ``m`` names and those listed after it: "两只猫一只狗"."""
    g = m.groupdict()
    items = [_pet_item(g.get("n"), g.get("cl"), m.group("animal"), g.get("name"))]
    pos = m.end()
    while (more := _MORE_PETS.match(sentence, pos)) is not None:
        items.append(_pet_item(more["n"], more["cl"], more["animal"], more["name"]))
        pos = more.end()
    n = g.get("n") or ""
    count = {"两": 2, "三": 3}.get(n) or (int(n) if n.isdigit() else 0)
    if not g.get("name") and count == len(items) - 1 > 1 and all(": " in i for i in items[1:]):
        # "两只猫：一只三花猫叫糯米，一只狸花猫叫年糕": the count heads the pets it lists.
        return items[1:]
    return items


# An animal word, not what it is part of: 猫毛, 狗粮 and 猫砂 are no pets.
_ANIMAL = (
    rf"(?:(?:(?![我你他她的了只条个])[\u4e00-\u9fff]){{0,3}}?(?:{ANIMAL_HEADS_ZH})"
    rf"|(?:{BREEDS_ZH})(?:猫|犬|狗)?)(?!毛|粮|砂|肉|过敏)"
)
_PET_NAME = rf"(?:[，,]?(?:叫|名叫|叫做|名字叫)(?P<name>{CJK}{{1,4}}?|[A-Za-z]+){END})?"
# When a pet died or left: "猫去年走了", "狗，前几天去世了".
_WHEN = r"(?:去年|前年|上个月|上周|前几天|前阵子|昨天|今年|已经|早就|也|刚刚?|不幸)*"
_MORE_PETS = re.compile(
    rf"(?:[，,、和：:]\s*)?(?:还有|另外还有|以及|另外)?(?P<n>一|两|三|几|\d)(?P<cl>只|条|头|匹)(?P<animal>{_ANIMAL}){_PET_NAME}"
)
_DATE = (
    r"(?:\d{4}\s*年\s*|\d{2}\s*年\s*)?[\d一二三四五六七八九十〇零两]{1,3}\s*月\s*[\d一二三四五六七八九十〇零两]{1,3}\s*[日号]?"
    r"|\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}"
)


# Read before the goals, which claim "想给女儿买个手表" whole: they share its words.
BEFORE_GOALS: tuple[Rule, ...] = (
    # "想给女儿买个手表", "带闺女去看病", "和老婆结婚十周年": the user does something for
    # or with a relative.
    rule(
        "family",
        r"(?:^|(?<=[，,。：:]))(?:想|打算|准备|要|今天|周末|明天|七夕|过年|生日|情人节|母亲节|父亲节)*"
        r"(?:给|带|陪|帮|替)"
        rf"(?P<rel>{KIN_ZH})(?!们)(?=买|挑|选|准备|送|订|找|去|看|过|报|办|做|上)"
        rf"|(?:^|(?<=[，,。：:]))(?:我)?(?:和|跟)(?P<rel2>{KIN_ZH})(?!们)(?=结婚|一起|去|过|庆祝|约会|打算|准备|住|还有|和)",
        0.8,
        value=lambda m, s: _family(m, s) if m.group("rel") else m.group("rel2"),
        claims=False,
    ),
)

RULES: tuple[Rule, ...] = (
    rule(
        "diet",
        rf"(?:我|我们|我们家|我家)(?:自己)?(?:现在|目前|一直|已经|平时|基本上?|常年|从小|也|都|是|在|坚持|开始"
        r"|最近|这几年|这半年|这阵子|这几个月|长期|主要|吃)*"
        rf"(?P<v>{DIET_WORDS_ZH})(?!菜|的人|餐厅|馆)(?:主义者|者|主义|饮食)?",
        0.9,
        statements_only=True,
        value=_diet,
    ),
    # "只能吃无麸质的", "现在改成高蛋白饮食了": a named diet, or any "…饮食" the user keeps.
    rule(
        "diet",
        rf"(?:我|^|(?<=[，,。]))(?:现在|目前|平时|一直)*(?:只能吃|只吃)(?P<v>{DIET_WORDS_ZH})(?:的)?"
        rf"|(?:我|^|(?<=[，,。]))(?:现在|目前|已经|开始|平时|一直|改成|换成|在|是|坚持)+(?P<v2>{CJK}{{2,4}}饮食)(?!的人|店|馆)"
        # "最近改成纯素了", "现在算是鱼素吧": a change to a named diet
        rf"|(?:我|^|(?<=[，,。]))(?:现在|目前|已经|最近|这阵子)*(?:改成|换成|变成|改吃|算是)了?(?P<v3>{DIET_WORDS_ZH})",
        0.85,
        statements_only=True,
        value=lambda m, s: m["v2"] if m["v2"] else _diet_named(m["v"] or m["v3"]),
    ),
    # "平时吃低嘌呤的": a diet named by what it limits or favours.
    rule(
        "diet",
        r"(?:我|^|(?<=[，,。]))(?:[^，,。]{0,6}?(?:吃|是))?"
        r"(?P<v>(?:低|无|少|高)(?:嘌呤|糖|盐|脂|碳水|麸质|油|钠|蛋白|GI))(?:饮食|的)",
        0.85,
        statements_only=True,
    ),
    # "现在按低脂吃了": eating by a diet's rules.
    rule(
        "diet",
        rf"(?:^|(?<=[，,。]))(?:我)?(?:现在|目前|已经|开始)*按(?:照)?(?P<v>{DIET_WORDS_ZH})(?:饮食)?(?:的?标准)?(?:来)?吃",
        0.85,
        statements_only=True,
        value=_diet,
    ),
    # A subjectless clause of a self-description: "…，素食主义者，…", "只吃清真的".
    rule(
        "diet",
        rf"(?:^|(?<=[，,。！!]))(?:平时|一直|只|都|基本|吃)*(?P<v>{DIET_WORDS_ZH})(?:主义者|者)?"
        r"(?=$|[，,。！!]|的(?:$|[，,。！!]))",
        0.85,
        statements_only=True,
        value=_diet,
    ),
    rule(
        "diet",
        r"(?:不(?:再)?吃素了|不再吃素|开始吃肉了?|不是素食(?:主义)?者了|不(?:再)?(?:生酮|轻断食)了"
        r"|停了(?:生酮|轻断食))",
        0.9,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "allergies",
        r"(?:我|^|(?<=[，,\s]))(?:也|还|从小|一直)*对(?P<v>[^，,。！？!?]{1,12}?)不(?:再)?过敏了",
        0.9,
        statements_only=True,
        retracts=True,
    ),
    # "现在已经不过敏了" with nothing named: every allergy on record ends; a test result
    # ("复查说…") speaks of the user.
    rule(
        "allergies",
        r"(?:我|^|(?<=[，,\s]))(?:(?:复查|检查|化验|体检|测试)(?:结果)?(?:说|显示)?)?"
        r"(?:现在|已经|早就|也|都|基本)*(?:不(?:再)?过敏了|没有?过敏了)",
        0.9,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "allergies",
        rf"(?:我(?:自己)?|^|(?<=[，,\s]))(?:另外|而且|还有|但是?|不过|可是)?{ADV}(?:是)?对(?P<v>[^，,。！？!?我对]{{1,12}}?)(?:有点|有些|比较|很|非常|特别|严重)?过敏",
        0.9,
        statements_only=True,
    ),
    rule(
        "allergies",
        r"我的?过敏(?:原|源)?(?:是|有)(?P<v>[^，,。！？!?]{1,12})"
        r"|我(?:自己)?(?:有)?(?P<v2>[^对是有，,。！？!?\s]{1,6}?)过敏(?!吗)",
        0.9,
        statements_only=True,
        reject=re.compile(rf"^(?:点|些|一点|严重|轻微|容易|季节性|不|会|是)|[（）()]|{KIN_ZH}"),
    ),
    # "小龙虾也过敏": one more allergen, fronted, the user left out.
    rule(
        "allergies",
        r"(?:^|(?<=[，,。]))(?P<v>[^，,。！？!?我你他她对]{1,8}?)(?:也|还)(?:有点|会|都)?过敏(?!吗|不)",
        0.85,
        statements_only=True,
    ),
    rule(
        "birthday",
        rf"我(?:的)?生日(?:快到了|马上就?到了|要到了|就要到了)?[，,\s]*(?:是|在)?[（(]?(?P<v>{_DATE})|我(?:是)?(?P<v2>{_DATE})(?:出生|生)"
        rf"|我?出生(?:于|在|日期是)(?P<v3>{_DATE})"
        # A clause of a self-description: "…，生日是八月二十九，…"
        rf"|(?:^|(?<=[，,：:]))生日(?:是|在)?(?P<v4>{_DATE})"
        rf"|(?:^|(?<=[，,]))(?:是)?(?P<v5>{_DATE})(?:出生|生)的?(?=$|[，,。！!])",
        0.9,
        statements_only=True,
    ),
    rule(
        "family",
        rf"(?:我|咱)(?:的|家的?)?(?P<rel>{KIN_ZH})(?!们|妹|弟|哥|姐|夫|棋|牙|工)(?:(?:叫|名叫|叫做)(?P<name>{CJK}{{2,3}}?){END})?",
        0.85,
        value=_family,
        any_subject=True,
    ),
    rule(
        "family",
        # A plan opening a clause has the user as its subject: "打算和老婆去海边".
        rf"(?:我|我们|(?:^|(?<=[，,。]))(?:打算|准备|计划|想|要))[^，,。]{{0,10}}?"
        rf"(?:和|跟|带着|带|陪着|陪|同)(?:我的?)?(?:{KIN_ZH})",
        0.85,
        value=_family_with,
        any_subject=True,
        claims=False,  # "我和老公养了只猫": the same words say who keeps the pet
    ),
    rule(
        "family",
        r"^(?P<rel>老公|老婆|媳妇|儿子|女儿|闺女)(?=今年|已经|刚|现在|也|还|在|是|都|最近|[\d一二三四五六七八九十两]+岁)",
        0.8,
        value=_family,
        any_subject=True,
    ),
    rule(
        "family",
        # 我们 only with a son or daughter: "我们有两个孩子" may be a class or a team.
        r"我们(?:也|还)?有(?P<n3>一个|一|两个|俩|三个|两|三|个)?(?P<rel3>儿子|女儿|闺女)"
        r"|(?:我|我家|家里)(?:也|还)?(?:有|家有)(?P<n>一个|一|两个|俩|三个|两|三|个)?(?P<rel>孩子|儿子|女儿|哥哥|姐姐|弟弟|妹妹|娃)"
        r"|我是(?P<n2>一个|两个|三个|俩)(?P<rel2>孩子|儿子|女儿)的(?:妈妈|爸爸|妈|爸|母亲|父亲)",
        0.85,
        value=_count_family,
        any_subject=True,
    ),
    rule(
        "family",
        r"(?:^|(?<=[，,。]))(?:我们家|我家|家里)(?:就|只有)(?:我)(?:跟|和)"
        rf"(?P<rel>{KIN_ZH})(?:俩人|两个人|两口子|俩)?(?=$|[，,。！!])",
        0.8,
        value=_family,
    ),
    rule(
        "family",
        r"(?:^|(?<=[，,。]))(?:我们家|我家|家里)(?:一共|总共|就)?[一二三四五六七八九两\d]口人?[：:，,]",
        0.8,
        value=_members,
        any_subject=True,
    ),
    rule(
        "family",
        r"(?:^|(?<=[，,。]))(?:我|我们)?(?:家里|家)(?:就|也|还)?有",
        0.8,
        value=_household,
        claims=False,
    ),
    # "现在不养了": no pet any more, whichever it was.
    rule(
        "pets",
        r"(?:我|^|(?<=[，,\s…]))(?:现在|已经|目前|暂时|以后)*(?:不养了|不再养了|没有?养了|不养(?:宠物|猫|狗)了)"
        # "家里一只宠物都没了", "送给我舅舅养了": none left
        r"|(?:一只)?宠物(?:都|也)?没(?:有)?了|(?:^|(?<=[，,\s]))(?:上周|上个月|前几天|已经|刚)*送(?:人|给[^，,。]{1,6}?)(?:养)?了",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: None,
    ),
    rule(
        "pets",
        rf"(?P<animal>{_ANIMAL})[，,]?{_WHEN}(?:去世|死|走|没|丢|送人|病逝|离开我们)了",
        0.85,
        statements_only=True,
        retracts=True,
        value=lambda m, s: m.group("animal"),
    ),
    rule(
        "pets",
        r"(?:(?:我|我们|咱|我家|家里|家|我(?:和|跟)[^，,。我]{1,4}?)(?:也|还|又|一起)?"
        r"(?:(?![没不以之曾])[^，,。]){0,2}?(?:养了|养着|养|有|就剩|只剩|还剩|领养了|收养了|捡了|抱了|接回了)(?!点|些|过)"
        r"|(?:^|(?<=[，,]))(?:上个月|上周|去年|今年|最近|前几天|昨天|刚刚?)?(?:也|还|又|另外)?"
        r"(?:养了|养着|领养了|收养了|捡了|抱了|接回了)"
        # "家里两只猫": home and a count, the verb left out
        r"|(?:^|(?<=[，,]))(?:我家|家里)(?=[一两三几\d](?:只|条|头|匹)))"
        rf"(?P<n>一|两|三|几|\d)?(?P<cl>只|条|头|匹|个)?(?P<animal>{_ANIMAL}){_PET_NAME}",
        0.85,
        statements_only=True,
        value=_pet,
    ),
    rule(
        "pets",
        rf"我(?:家|的)?(?:的)?(?P<animal>{_ANIMAL})(?:叫|名叫|叫做)(?P<name>{CJK}{{1,4}}?|[A-Za-z]+){END}",
        0.85,
        statements_only=True,
        value=_pet,
    ),
    # "家里就我和对象，还有一只巴西龟", "家里俩猫，一只橘猫叫大橘": pets listed in a
    # sentence about the home.
    rule(
        "pets",
        r"(?:^|(?<=[，,]))(?:还有|另外还有|另外|以及)?(?=[一两三]只|[一两三]条)"
        rf"(?P<n>一|两|三)(?P<cl>只|条)(?P<animal>{_ANIMAL}){_PET_NAME}",
        0.8,
        statements_only=True,
        value=lambda m, s: _pet(m, s) if re.search(r"家里|我家|养", s[: m.start()]) else None,
    ),
)
