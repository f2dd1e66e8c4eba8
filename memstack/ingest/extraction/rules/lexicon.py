"""Closed word classes the rules anchor on: kin terms, occupations, animals, diets.

Each list names a class ("a kin term", "an occupation noun"), never a case: a rule that
needs "my <kin term>" uses the whole class. Lists are alternations for regexes, longest
spellings first where one is a prefix of another.
"""

from __future__ import annotations


def alternation(words: str) -> str:
    """ "a b ab" → "ab|a|b": a regex alternation that tries longer spellings first."""
    return "|".join(sorted(set(words.split()), key=lambda w: (-len(w), w)))


# --- people ---------------------------------------------------------------------------------

# Kin terms that make a family member ("我老公", "my wife").
KIN_ZH = alternation(
    "老婆 老公 妻子 丈夫 爱人 媳妇 太太 先生 男朋友 女朋友 男友 女友 对象 未婚夫 未婚妻 "
    "儿子 女儿 闺女 "
    "孩子 孩子们 宝宝 小孩 爸爸 妈妈 爸 妈 父亲 母亲 父母 爸妈 哥哥 姐姐 弟弟 妹妹 哥 姐 弟 妹 "
    "爷爷 奶奶 外公 外婆 姥姥 姥爷 公公 婆婆 岳父 岳母 丈母娘 老丈人 双胞胎"
)
KIN_EN = alternation(
    "wife husband spouse partner fiance fiancee fiancé fiancée boyfriend girlfriend son sons "
    "daughter daughters kid kids children child baby toddler twins mom mum mother dad father "
    "parents brother brothers sister sisters siblings grandma grandmother grandpa grandfather "
    "grandparents stepson stepdaughter stepmom stepdad in-laws mother-in-law father-in-law "
    "aunt uncle cousin nephew niece"
)
# People who are not kin but whose facts are theirs, not the user's.
OTHERS_ZH = alternation(
    "朋友 同事 室友 同学 老板 领导 邻居 家人 客户 老师 医生 闺蜜 哥们 兄弟 网友 别人 人家 他 她 "
    "他们 她们 它 客服 店员 销售 博主"
)
OTHERS_EN = alternation(
    "friend friends buddy roommate flatmate coworker co-worker coworkers colleague colleagues boss "
    "manager neighbor neighbour classmate client customer teacher doctor family folks"
)
# Common Chinese surnames, double ones first: a name jieba does not know ("邵晴川" reads as
# 邵 + 晴川) is still a name when it opens with one.
SURNAMES_ZH = (
    "欧阳 司马 上官 诸葛 东方 慕容 令狐 皇甫 尉迟 公孙 司徒 夏侯 端木 南宫 ".split()
    + list(
        "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘于蒋蔡余杜叶程"
        "苏魏吕丁任沈姚卢姜崔钟谭陆汪范金石廖贾夏韦付方白邹孟熊秦邱江尹薛闫段雷侯龙史陶黎贺顾毛郝"
        "龚邵万钱严覃武戴莫孔向汤常温康施文牛樊葛邢安齐易乔伍庞颜倪庄聂章鲁岳翟殷詹申欧耿关兰焦俞左"
        "柳甘祝包宁尚符舒阮柯纪梅童凌毕单季裴霍涂成苗谷盛曲翁冉骆蓝路游辛靳管柴蒙鲍华喻祁蒲房滕屈饶"
        "解牟艾尤阳时穆农司卓古吉缪简车项连芦麦褚娄窦戚岑景党宫费卜冷晏席卫米柏宗瞿桂全佟应臧闵苟邬"
        "边卞姬师和仇栾隋商刁沙荣巫寇桑郎甄丛仲虞敖巩明佘池查麻苑迟邝"
    )
)
# Words after a name that make it a title or a form of address ("张老师", "李总").
TITLES_ZH = "老师|先生|女士|小姐|总|经理|医生|阿姨|叔叔|哥|姐|老板|师傅|同学|主任|教授"

# A one-character kin term reads as the two-character form ("我爸" → "爸爸"): a single
# character is too short to compare or display on its own.
KIN_ZH_FULL = {"爸": "爸爸", "妈": "妈妈", "哥": "哥哥", "姐": "姐姐", "弟": "弟弟", "妹": "妹妹"}

# Capitalised words that follow "I'm" or "my wife" without being a name.
NOT_NAMES = frozenset(
    """
    a an the and or but so not no just also still really very too here there back done fine
    good great ok okay sure sorry glad happy tired busy ready new old single married vegan
    vegetarian allergic looking trying going thinking planning based from in at on with
    american canadian british english chinese japanese korean indian french german spanish
    italian mexican brazilian australian irish scottish russian dutch swedish norwegian danish
    finnish polish greek turkish vietnamese thai filipino indonesian malaysian singaporean
    taiwanese pakistani nigerian kenyan egyptian israeli iranian swiss austrian belgian
    portuguese argentinian chilean colombian peruvian cuban jewish muslim christian catholic
    buddhist hindu asian european african latino latina gay straight retired pregnant
    currently now mostly moving is was has had will would can could who what when where why
    how which that this these those it its he she they we you i me my mine our your his her
    their monday tuesday wednesday thursday friday saturday sunday january february march
    april may june july august september october november december
    """.split()
)

# --- work -------------------------------------------------------------------------------------

# A Chinese occupation ends in one of these: 产品经理, 小学老师, 程序员, 设计师.
OCCUPATION_ZH = alternation(
    "师 员 经理 主管 总监 总裁 老板 医生 护士 律师 老师 教师 教授 学生 大学生 研究生 博士生 "
    "博士 硕士 顾问 专家 编辑 记者 作家 主播 博主 司机 厨师 警察 会计 财务 运营 销售 设计 开发 "
    "前端 后端 测试 产品 法官 军人 农民 工人 主持人 翻译 秘书 文员 前台 人事 行政 保安 导游 "
    "空姐 飞行员 演员 歌手 模特 画家 摄影师 创业者 工作者 从业者 自由职业者 个体户 全职妈妈 "
    "全职太太 家庭主妇 退休 码农 HR 教练 店主 兽医 牙医 中医 厨 保姆 快递员 外卖员 策划 美工 剪辑 "
    "客服 导购 店长 站长 电工 水电工 木工 焊工 瓦工 油漆工 装修工 主编 编剧 导演 制片人 配音 "
    "UP主 up主"
)
OCCUPATION_EN = alternation(
    "engineer developer programmer coder doctor physician surgeon nurse teacher professor "
    "lecturer student designer manager lawyer attorney accountant writer journalist editor "
    "scientist researcher analyst consultant architect chef cook driver pilot artist "
    "photographer musician dentist pharmacist farmer officer salesperson entrepreneur founder "
    "freelancer translator tester technician electrician plumber carpenter mechanic paramedic "
    "therapist psychologist vet veterinarian librarian marketer recruiter banker trader "
    "economist cashier barista bartender waiter waitress firefighter soldier cop detective "
    "realtor agent clerk administrator secretary assistant intern producer director ceo cto "
    "cfo owner retiree homemaker paralegal dev devops sysadmin coach trainer instructor tutor "
    "counselor counsellor caregiver carer nanny babysitter housekeeper cleaner janitor welder "
    "builder contractor surveyor actuary auditor broker underwriter judge policeman policewoman "
    "sergeant marine sailor midwife optometrist physiotherapist physio chiropractor dietitian "
    "nutritionist radiologist psychiatrist principal postdoc academic hairdresser stylist "
    "barber butcher baker tailor florist gardener landscaper courier postman miner fisherman "
    "streamer youtuber influencer blogger hygienist sommelier pianist violinist animator "
    "illustrator copywriter optician interpreter attendant dispatcher bookkeeper receptionist "
    "anesthetist anaesthetist sonographer phlebotomist radiographer beekeeper servant "
    "shopkeeper storekeeper tech"
)
# A team one works in rather than a place: "I'm in QA", "I work in HR". The acronyms keep
# their case so that "I'm in it" stays a pronoun.
DEPARTMENTS_EN = (
    r"(?-i:HR|IT|QA|PR|R&D)|"
    + alternation(
        "marketing sales finance accounting recruiting logistics procurement compliance admin "
        "operations ops support legal"
    )
    + r"|customer\s+service"
)

# --- animals ----------------------------------------------------------------------------------

ANIMALS_EN = alternation(
    "dog dogs puppy puppies pup cat cats kitten kittens kitty rabbit rabbits bunny hamster "
    "hamsters guinea-pig parrot parrots bird birds budgie cockatiel fish goldfish turtle "
    "tortoise snake lizard gecko iguana ferret hedgehog chinchilla horse pony "
    "retriever labrador poodle corgi husky beagle bulldog terrier shepherd dachshund "
    "chihuahua pug collie spaniel schnauzer doodle labradoodle goldendoodle pomeranian "
    "rottweiler shiba samoyed greyhound whippet tabby ragdoll sphynx shorthair duck ducks goose "
    "chicken chickens hen hens goat goats pig pigs sheep alpaca llama frog rat rats mouse mice "
    "gerbil gerbils betta bettas parakeet parakeets macaw conure chameleon python koi donkey "
    "tortie calico"
)
# "guinea pig" and "maine coon" are two words; the regexes spell them with a space.
ANIMALS_EN = (
    ANIMALS_EN.replace("guinea-pig", r"guinea\s+pigs?")
    + r"|maine\s+coon|bearded\s+dragons?|axolotls?|canar(?:y|ies)|cockatoos?|tarantulas?"
    + r"|sugar\s+gliders?"
)
# The head of a Chinese animal word (布偶猫, 狗狗), or a breed named without one (柯基).
ANIMAL_HEADS_ZH = alternation(
    "猫咪 猫 狗狗 狗 犬 兔子 兔 仓鼠 鼠 鹦鹉 鸟 鱼 龟 蛇 蜥蜴 刺猬 龙猫 豚鼠 荷兰猪 马 "
    "鸭 鹅 鸡 羊 猪"
)
BREEDS_ZH = alternation(
    "柯基 泰迪 金毛 哈士奇 二哈 萨摩耶 边牧 拉布拉多 比熊 博美 法斗 德牧 阿拉斯加 雪纳瑞 "
    "贵宾 吉娃娃 巴哥 杜宾 布偶 英短 美短 加菲 暹罗 蓝猫 银渐层 金渐层 缅因 橘猫 狸花 三花 玳瑁 "
    "比格 约克夏 马尔济斯 柴犬 秋田 斗牛犬 腊肠 雪貂"
)

# --- food -------------------------------------------------------------------------------------

DIETS_EN = alternation(
    "vegan vegetarian pescatarian pescetarian flexitarian keto paleo gluten-free dairy-free "
    "lactose-free halal kosher plant-based low-carb carnivore whole30 eggetarian ovo-vegetarian "
    "lacto-vegetarian macrobiotic mediterranean low-fodmap raw-vegan fruitarian"
)
DIETS_EN = DIETS_EN.replace("-", r"[-\s]")
# Chinese diet words as said, and the minimal form stored ("吃素" → "素食").
DIETS_ZH = {
    "吃全素": "纯素",
    "吃纯素": "纯素",
    "纯素": "纯素",
    "全素": "纯素",
    "蛋奶素": "蛋奶素",
    "吃素": "素食",
    "素食": "素食",
    "吃清真": "清真",
    "清真": "清真",
    "生酮": "生酮饮食",
    "低碳水": "低碳水饮食",
    "无麸质": "无麸质饮食",
    "轻断食": "轻断食",
    "地中海饮食": "地中海饮食",
    "低脂饮食": "低脂饮食",
    "低盐饮食": "低盐饮食",
    "低脂": "低脂饮食",
    "控糖": "控糖",
    "鱼素": "鱼素",
    "海鲜素": "鱼素",
    "过午不食": "过午不食",
    "碳水循环": "碳水循环",
}
DIET_WORDS_ZH = alternation(" ".join(DIETS_ZH))
