"""The small multilingual text the tiny checkpoint's BPE merges are learnt from.

Written for this project. It covers the ten languages the 12 Hz models speak, digits,
punctuation and the chat-format words of the prompt templates, so that common words of
test sentences tokenize into a handful of pieces instead of single bytes. Changing this text
changes the tiny tokenizer and so every tiny checkpoint (the cache in `checkpoint/files.py` is
keyed by a hash of this file, so cached ones are regenerated).
"""

SAMPLE_TEXT = """\
user
assistant
system
<|im_start|>user
Hello world, this is a test of the speech service.<|im_end|>
<|im_start|>assistant
Hello! The weather is nice today, and the sun is shining over the city.
Please read the following sentence slowly and clearly.
We are testing the streaming text to speech system with a small random model.
The quick brown fox jumps over the lazy dog. It was 12:45 when the train left platform 3.
Numbers like 2024, 3.14 and 1,000,000 should be spoken naturally.
She said: "I will be there at seven o'clock, don't worry." They'll wait; we've seen it.
Speak in a warm, friendly voice with a calm and steady tone.
A deep male voice, slightly husky, speaking slowly with a British accent.
A bright young female voice, cheerful and energetic, with clear pronunciation.
你好，世界！今天天气很好，我们一起去公园散步吧。
这是一个语音合成系统的测试句子，请用温柔的声音朗读。
北京的秋天很美，天空很蓝，树叶变成了金黄色。
こんにちは、世界。今日はとても良い天気ですね。
これは音声合成のテストです。ゆっくり話してください。
안녕하세요, 세계. 오늘 날씨가 정말 좋네요.
이것은 음성 합성 시스템의 테스트 문장입니다.
Hallo Welt! Das Wetter ist heute schön, und wir gehen in den Park.
Dies ist ein Test des Sprachsynthesesystems mit einer ruhigen Stimme.
Bonjour le monde ! Il fait beau aujourd'hui et nous allons au parc.
Ceci est un test du système de synthèse vocale, avec une voix douce.
¡Hola mundo! Hoy hace buen tiempo y vamos a pasear por el parque.
Esta es una prueba del sistema de síntesis de voz con una voz tranquila.
Ciao mondo! Oggi il tempo è bello e andiamo a fare una passeggiata.
Questa è una prova del sistema di sintesi vocale con una voce calma.
Olá mundo! Hoje o tempo está bom e vamos passear no parque.
Este é um teste do sistema de síntese de voz com uma voz suave.
Привет, мир! Сегодня хорошая погода, и мы идём гулять в парк.
Это тест системы синтеза речи со спокойным голосом.
"""
