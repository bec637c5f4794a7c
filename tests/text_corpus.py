"""Texts for tokenizer property tests: many scripts, digits, whitespace runs, indented newlines,
emoji sequences, contractions, mixed case, decomposed accents, jamo, and added tokens in the text."""
from __future__ import annotations

CORPUS = [
    # English prose, contractions, numbers, the streamed-cut bug's own text
    "Hello world. It's a fine day, isn't it? We'll see; they'd've known.",
    "a fee.\n\n  5. Convey the work to the recipient",
    "I'M SURE YOU'RE RIGHT, BUT WE'VE SEEN IT'S 'QUOTED' 'LL 'D 'M",
    "The price is $1,234.56 (about 1.2k EUR) on 2026-11-28 at 09:45:07.",
    "Call +1 (555) 010-9999 or write to someone@example.com, https://example.org/a/b?c=d&e=f#g",
    "3.14159265358979 × 2 = 6.28318530717958; 10^6 ≥ 999,999 ± 1 ≈ ∞",
    # mixed case and camel case (the two split regexes differ here)
    "iPhone McDonald's JavaScript TypeScript XMLHttpRequest getElementById HTMLParser iOS macOS",
    "camelCaseWords and PascalCase and snake_case and SCREAMING_CASE and kebab-case ABCdef ABcDE",
    # whitespace: runs, tabs, newlines with indentation, CRLF, trailing and leading spaces
    "  leading spaces and trailing   ",
    "\nnewline first, then\n\n\n\ttabbed\n    indented four\n\t\t two tabs\r\n  crlf\r\n\r\nend",
    "def f(x):\n    if x > 0:\n        return x  # positive\n    return -x\n\n\nprint(f(-3))\n",
    "a  b   c    d\t\te \u00a0f\u2003g\u3000h \u2028i\u2029j",
    "list:\n  - one\n  - two\n\n  5. five\n  10. ten\n",
    # Chinese, Japanese, Korean (precomposed and conjoining jamo), Cantonese
    "其实我真的有发现，我是一个特别善于观察别人情绪的人。今天天气很好！（括号）“引号”",
    "こんにちは、世界。カタカナとひらがな、そして漢字。ｶﾀｶﾅ半角、ＡＢＣ全角１２３。",
    "안녕하세요, 세계! 한국어 텍스트입니다. \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",
    "佢哋今日去咗邊度？我唔知喎。",
    # European languages with accents, precomposed and decomposed
    "Émigré café naïve façade coöperate résumé — Ça va? ¡Sí! Olá, tudo bem. Straße Größe",
    "e\u0301 decomposed a\u0300 o\u0308 n\u0303 and stacked a\u0323\u0302 q\u0307\u0323 x\u031b\u0323",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου Κόσμε! Ελληνικά με τόνους: άέήίόύώ ΐΰ",
    # right-to-left and Indic scripts with combining marks
    "مرحبا بالعالم! هذا نص عربي مع تشكيل: مُحَمَّد ١٢٣٤٥",
    "שלום עולם! זה טקסט בעברית עם ניקוד: שָׁלוֹם",
    "नमस्ते दुनिया! यह हिंदी पाठ है। क्षत्रिय ज्ञान ०१२३",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ",
    "ভাষা தமிழ் తెలుగు ಕನ್ನಡ മലയാളം ગુજરાતી ਪੰਜਾਬੀ",
    # emoji: single, skin tones, ZWJ families, flags, keycaps, variation selectors
    "emoji 😀 ok 👍🏽 👨‍👩‍👧‍👦 family 🇯🇵🇺🇸 flags 1️⃣ keycap ❤️ heart ☺︎ text style",
    "🎉🎉🎉 party!!! 🚀→🌕 (to the moon) ✨✨",
    # punctuation runs, quotes, slashes, brackets
    "Wait... what?!?! -- no — yes –– maybe /// path/to/file.txt \\\\server\\share «guillemets» „Anführung“",
    "end with newlines after punctuation.\n\n\nAnd again!\r\n\r\n",
    "x/\ny/\n\nz//\n",
    # digits in scripts and runs
    "Room 101, floor 23, ２０２６年１１月２８日, ١٢٣ ४५६ 0x1F600 1e-9 -0.5",
    # added tokens in the text, complete and near misses
    "<|im_start|> inside text <|im_end|> and <tts_pad> <think>reasoning</think> done",
    "near misses: <|im_end| <|im_end| > <|IM_END|> < |im_end|> <|im_end|><|im_end|>",
    "<tool_call>{\"name\": \"f\"}</tool_call><|endoftext|>tail",
    # mixed scripts without spaces
    "Qwen3-TTS支持10种语言：中文、English、日本語、한국어 and Deutsch!",
    "abc中文def日本ghi한국jkl",
    # nothing but whitespace or punctuation around words
    "\n\n\n",
    "   x",
    "...",
    "a",
]
