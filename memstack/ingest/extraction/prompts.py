"""The LLM extractor's prompts: one message (``EXTRACT_PROMPT``) or a user's messages of
an ingest batch (``BATCH_PROMPT``); both share the fields, the keys and the rules.

The key list and value shapes repeat docs/facts.md: a model that writes the documented
shape needs no guessing from the vocabulary (the vocabulary normalises what it can all
the same)."""

from __future__ import annotations

_FIELDS = """\
Each fact has the fields
  "key": string, "value": JSON, "type": "preference" | "profile" | "task" | "constraint",
  "confidence": number 0..1, "source": "user_stated" | "extract" | "inferred",
  "supersedes": the old value this one replaces, or null,
  "override": true | false,
  "retracts": true only when the user withdraws the key's value (rule 8), else leave it out.

Use these keys when they fit:
  budget_limit (constraint): {"amount": number, "currency": ISO code such as "CNY", "USD"}
  likes, dislikes, focus (preference): list of short strings
  do_not_recommend (constraint): list of things the user does not want recommended
  name, city, occupation (profile): string
  language (preference): ISO 639-1 code of the language the user wants answers in
  goal (task): what the user is trying to get done, a short string
  diet (profile): the user's diet in their words: "vegetarian", "素食", "keto"
  allergies (constraint): list of allergens, the thing alone: ["peanuts"], ["芒果"],
    never "peanut allergy"
  birthday (profile): "MM-DD", or "YYYY-MM-DD" when the user gives the year
  family (profile): list of "<relation>" or "<relation>: <name>": ["wife: Anna",
    "two kids"], ["姐姐: 小雨", "儿子"]
  pets (profile): list of "<animal as the user calls it>" or "<animal>: <name>":
    ["golden retriever: Biscuit"], ["布偶猫: 雪球", "柯基"]
  anything else durable: a short snake_case English key (letters, digits, _).
Values are short: a number, a string, a list of short strings or a small object.
"""

_RULES = """\
Rules:
1. Current values only. When the user changes their mind the value is the NEW value,
   never a range, average or compromise: "预算五千……其实我可以到八千" gives 8000,
   not "5000-8000" and not 6500.
2. If known_facts holds the key with a different value, put that old value in
   "supersedes". If the message itself names the old value ("从五千改到八千"), use it.
3. "override" is true when the message carries a turn word: 其实, 不过, 改一下, 改成, 还是,
   算了, actually, instead, changed my mind, on second thought, scratch that.
4. Keep free-text values in the user's own language and words; never translate:
   "重点关注续航和重量" gives focus ["续航", "重量"].
5. Keep negations: "不要推荐游戏本" is do_not_recommend ["游戏本"], never likes.
6. source is "user_stated" for what the user said outright, "inferred" for anything you
   conclude that the user did not say, "extract" for stated facts that needed reading
   between the lines. No facts from small talk.
7. Only the user's own current facts. Other people's facts are not the user's ("my
   sister is vegan" gives no diet; "my friend lives in Paris" gives no city), except
   that the user's family and pets are: "my wife Anna" gives family ["wife: Anna"].
   Nothing from questions ("我叫什么名字？", "what budget should I set?"),
   hypotheticals ("if I were vegan..."), quotes of others, or text the user pasted
   (an assistant's or anyone's words): they state no fact about the user. Never store
   a negated value ("not vegetarian"); rule 8 says what a withdrawal is.
8. When the user withdraws a value with nothing in its place ("I'm not vegetarian
   anymore", "不过现在不吃素了", "the cat passed away", "我已经不过敏了"), report
   that key with "retracts": true and as value what was withdrawn, or null when the
   message does not say. For a list key the value lists only the items that went
   (["cat: Tom"]); the items not named stay.
"""

_EXAMPLE_FACTS_1 = """\
[{"key": "budget_limit", "value": {"amount": 5000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated", "supersedes": null,
"override": false}, {"key": "focus", "value": ["续航", "重量"], "type": "preference",
"confidence": 0.9, "source": "user_stated", "supersedes": null, "override": false}]"""

_EXAMPLE_FACTS_2 = """\
[{"key": "budget_limit", "value": {"amount": 8000, "currency": "CNY"},
"type": "constraint", "confidence": 0.95, "source": "user_stated",
"supersedes": {"amount": 5000, "currency": "CNY"}, "override": true},
{"key": "do_not_recommend", "value": ["游戏本"], "type": "constraint",
"confidence": 0.95, "source": "user_stated", "supersedes": null, "override": true}]"""

_KNOWN_3 = '{"diet": "vegetarian", "pets": ["cat: Tom", "dog: Rex"]}'
_MESSAGE_3 = (
    "My wife Anna says hi! I'm not vegetarian anymore, and sadly Tom passed away. "
    "What diet would you suggest? My sister is vegan."
)
_EXAMPLE_FACTS_3 = """\
[{"key": "family", "value": ["wife: Anna"], "type": "profile", "confidence": 0.9,
"source": "user_stated"}, {"key": "diet", "value": "vegetarian", "type": "profile",
"confidence": 0.9, "source": "user_stated", "retracts": true}, {"key": "pets",
"value": ["cat: Tom"], "type": "profile", "confidence": 0.85, "source": "user_stated",
"retracts": true}]"""

EXTRACT_PROMPT = f"""\
You extract durable facts about the USER from one chat message, for a long-term memory.
Reply with ONE JSON object and nothing else: {{"facts": [...]}}. {_FIELDS}
{_RULES}   Nothing to extract: {{"facts": []}}.

Examples:
known_facts {{}}, message "我预算不超过五千，重点关注续航和重量" →
{{"facts": {_EXAMPLE_FACTS_1}}}

known_facts {{"budget_limit": {{"amount": 5000, "currency": "CNY"}}}},
message "其实我可以到八千，别再推荐游戏本了" →
{{"facts": {_EXAMPLE_FACTS_2}}}

known_facts {_KNOWN_3}, message "{_MESSAGE_3}" →
{{"facts": {_EXAMPLE_FACTS_3}}}
"""

BATCH_PROMPT = f"""\
You extract durable facts about the USER from their chat messages, for a long-term
memory. You get known_facts and the user's messages in the order they were sent, each
with an index. Reply with ONE JSON object and nothing else, holding every index:
{{"facts_by_message": {{"0": [...], "1": [...]}}}}, the facts each message states.
{_FIELDS}
{_RULES}9. Read the messages in order: a fact an earlier message states is known for the later
   ones, so a later message that changes it supersedes the earlier value.
   A message with nothing to extract gets [].

Example:
known_facts {{}}, messages [{{"index": 0, "text": "我预算不超过五千，重点关注续航和重量"}},
{{"index": 1, "text": "好的"}}, {{"index": 2, "text": "其实我可以到八千，别再推荐游戏本了"}}] →
{{"facts_by_message": {{"0": {_EXAMPLE_FACTS_1},
"1": [],
"2": {_EXAMPLE_FACTS_2}}}}}

known_facts {_KNOWN_3}, messages [{{"index": 0, "text": "{_MESSAGE_3}"}}] →
{{"facts_by_message": {{"0": {_EXAMPLE_FACTS_3}}}}}
"""
