"""The bot's own words, per Telegram language, with English as the fallback.

Keys are stable identifiers; handlers call `t(key, lang, **values)`. Add English first; other
languages may lag and then fall back to English per key.
"""

from __future__ import annotations

SUPPORTED_LANGUAGES = ("en", "pt", "id", "tr", "ja")

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "start": (
            "Hi {name}! I am mnemobot, a chat assistant that remembers what matters "
            "across sessions.\n\nJust write to me. Commands:\n{commands}"
        ),
        "help": (
            "Write a message and I answer with this chat's model, streaming the reply as it "
            "is written.\n\n{commands}\n\nIn groups I answer when mentioned or replied to."
        ),
        "cmd_start": "Introduce the bot",
        "cmd_help": "How to use the bot",
        "cmd_model": "Choose the model for this chat",
        "cmd_new": "Start a new session",
        "cmd_cancel": "Stop the reply being written",
        "new_session": "New session started.",
        "not_allowed": (
            "Sorry, this is a private bot. Your Telegram user id is {user_id}; "
            "ask the owner to add it to ALLOWED_USER_IDS."
        ),
        "text_only": "Sorry, I can only read text messages for now. Please write your message.",
        "empty_message": "Please write something after mentioning me.",
        "model_menu": "Current model: {label}. Choose a model for this chat:",
        "model_set": "Model for this chat: {label}.",
        "model_unknown": "Unknown model {model_id!r}. Use /model to see the models you can pick.",
        "model_refused": "That model is not available.",
        "model_none": "No model is available: the owner has not configured any provider key.",
        "tier_frontier": "frontier",
        "tier_balanced": "balanced",
        "tier_fast": "fast",
        "tier_custom": "custom",
        "nothing_to_cancel": "Nothing to cancel.",
        "cancelled": "Stopped.",
        "reply_cancelled": "(stopped)",
        "answered_by": "Answered by {label} (fallback for {requested}).",
        "model_restarted": "{from_label} stopped answering; continuing with {to_label}.",
        "all_models_failed": (
            "Sorry, no model could answer right now ({reason}). Your message is saved; "
            "please try again in a minute."
        ),
        "reason_rate_limit": "rate limited",
        "reason_quota": "provider quota exhausted",
        "reason_auth": "provider key rejected",
        "reason_unavailable": "provider unavailable",
        "reason_timeout": "timed out",
        "reason_empty": "empty answer",
        "reason_bad_request": "request refused",
        "reason_other": "provider error",
        "internal_error": "Sorry, something went wrong on my side. Your message is saved.",
        "unknown_command": "I do not know that command. /help lists what I can do.",
        "cmd_memory": "Show what I remember about you",
        "cmd_forget": "Clear my long-term memory (asks first)",
        "cmd_recall": "Search past conversations: /recall QUERY",
        "memory_empty": "I have no long-term memory for this chat yet.",
        "memory_header": "What I remember (long-term memory):",
        "memory_pending": "{count} earlier session(s) are still being saved to memory.",
        "forget_confirm": (
            "Clear the long-term memory and the searchable history of this chat? "
            "This cannot be undone."
        ),
        "forget_yes": "Yes, forget",
        "forget_no": "Keep it",
        "forget_done": "Done: long-term memory and history cleared.",
        "forget_kept": "Nothing was cleared.",
        "recall_usage": "Write what to look for, e.g. /recall postgres migration",
        "recall_too_long": "That query is too long; use at most {limit} characters.",
        "recall_none": "Nothing in the history matches {query!r}.",
        "recall_header": "Best matches for {query!r}:",
        # usage, budgets, limits, /stats, shutdown
        "cmd_usage": "Your tokens and cost",
        "cmd_stats": "Bot statistics (admins)",
        "usage_title_self": "Your usage (days and months in UTC):",
        "usage_title_user": "Usage of user {user_id} (UTC):",
        "usage_title_bot": "Usage of the whole bot (UTC):",
        "usage_none": "No usage yet.",
        "usage_today": "Today: {tokens} tokens, {cost}",
        "usage_month": "This month: {tokens} tokens, {cost}",
        "usage_line": "  • {model} ({purpose}): {tokens} tokens, {cost}, requests: {calls}",
        "usage_purpose_chat": "chat",
        "usage_purpose_consolidation": "memory",
        "usage_memory_note": (
            "Included this month: {tokens} tokens, {cost} of background memory work for you."
        ),
        "usage_everyone_title": "Everyone this month (UTC):",
        "usage_everyone_line": (
            "  • {user}: today {today_cost}, month {month_cost} "
            "({month_tokens} tokens, memory {memory_cost})"
        ),
        "usage_bot_total": (
            "Whole bot: today {today_tokens} tokens, {today_cost}; "
            "this month {month_tokens} tokens, {month_cost}."
        ),
        "usage_admin_only": "Only admins can see other users' usage.",
        "usage_bad_args": "Use /usage, or /usage USER_ID to see one user (admins).",
        "budget_user_daily": (
            "You have reached your daily budget of {limit}, so I did not send this message to "
            "a model. I can answer again tomorrow (UTC). Your memory is kept."
        ),
        "budget_user_monthly": (
            "You have reached your monthly budget of {limit}, so I did not send this message "
            "to a model. I can answer again next month (UTC). Your memory is kept."
        ),
        "budget_bot_daily": (
            "This bot has reached its daily budget of {limit}, so I did not send this message "
            "to a model. Please try again tomorrow (UTC)."
        ),
        "budget_bot_monthly": (
            "This bot has reached its monthly budget of {limit}, so I did not send this "
            "message to a model. Please try again next month (UTC)."
        ),
        "rate_limited": (
            "You are sending messages faster than this bot allows. Please wait {seconds} s; "
            "messages sent meanwhile are not answered."
        ),
        "input_too_long": (
            "Your message is too long ({length} characters; the limit is {limit}), so I did "
            "not read it. Please shorten it."
        ),
        "admin_only": "This command is for the bot's admins.",
        "shutting_down": "The bot is restarting; please send your message again in a minute.",
        "reply_interrupted": "(interrupted: the bot restarted; please ask again)",
        "stats_title": "mnemobot statistics",
        "stats_queue": "Memory queue: {pending} pending, {running} running, {done} done",
        "stats_oldest": "Oldest waiting job: since {at} UTC ({ago} ago)",
        "stats_failed_jobs": "Failed jobs waiting for a retry: {count}",
        "stats_mean_attempts": "Models tried per saved job: {mean} on average, at most {max}",
        "stats_outcomes": "Consolidation outcomes per model, last {days} days:",
        "stats_none": "  (none yet)",
        "stats_gateways": "Gateways:",
        "stats_gateway": (
            "  • {gateway}: breaker {breaker}, failures in a row {failures}, "
            "keys available {keys_ok}/{keys}"
        ),
        "stats_gateway_off": "  • {gateway}: no key configured",
        "stats_model_breaker": "  • model {model}: breaker {breaker} ({seconds} s)",
        "stats_spend_today": (
            "Spend today (UTC): {tokens} tokens, {cost} (chat {chat_cost}, memory {memory_cost})"
        ),
        "stats_turns_in_flight": "Replies being written now: {count}",
    },
}


# Translations. Keep every key and every {placeholder} of the English text (a test checks).
MESSAGES["pt"] = {
    "start": (
        "Olá, {name}! Eu sou o mnemobot, um assistente de conversa que lembra o que importa "
        "de uma sessão para outra.\n\nÉ só me escrever. Comandos:\n{commands}"
    ),
    "help": (
        "Escreva uma mensagem e eu respondo com o modelo deste chat, mostrando a resposta "
        "enquanto ela é escrita.\n\n{commands}\n\nEm grupos, respondo quando sou mencionado "
        "ou quando respondem a uma mensagem minha."
    ),
    "cmd_start": "Apresentar o bot",
    "cmd_help": "Como usar o bot",
    "cmd_model": "Escolher o modelo deste chat",
    "cmd_new": "Começar uma nova sessão",
    "cmd_cancel": "Parar a resposta em andamento",
    "new_session": "Nova sessão iniciada.",
    "not_allowed": (
        "Desculpe, este é um bot privado. Seu ID de usuário do Telegram é {user_id}; "
        "peça ao dono para adicioná-lo a ALLOWED_USER_IDS."
    ),
    "text_only": "Desculpe, por enquanto só consigo ler mensagens de texto. Escreva sua mensagem.",
    "empty_message": "Escreva algo depois de me mencionar.",
    "model_menu": "Modelo atual: {label}. Escolha um modelo para este chat:",
    "model_set": "Modelo deste chat: {label}.",
    "model_unknown": (
        "Modelo desconhecido {model_id!r}. Use /model para ver os modelos disponíveis."
    ),
    "model_refused": "Esse modelo não está disponível.",
    "model_none": (
        "Nenhum modelo está disponível: o dono não configurou nenhuma chave de provedor."
    ),
    "tier_frontier": "topo de linha",
    "tier_balanced": "equilibrado",
    "tier_fast": "rápido",
    "tier_custom": "personalizado",
    "nothing_to_cancel": "Não há nada para cancelar.",
    "cancelled": "Parado.",
    "reply_cancelled": "(interrompido)",
    "answered_by": "Respondido por {label} (no lugar de {requested}).",
    "model_restarted": "{from_label} parou de responder; continuando com {to_label}.",
    "all_models_failed": (
        "Desculpe, nenhum modelo conseguiu responder agora ({reason}). Sua mensagem foi "
        "salva; tente de novo em um minuto."
    ),
    "reason_rate_limit": "limite de requisições atingido",
    "reason_quota": "cota do provedor esgotada",
    "reason_auth": "chave do provedor recusada",
    "reason_unavailable": "provedor indisponível",
    "reason_timeout": "tempo esgotado",
    "reason_empty": "resposta vazia",
    "reason_bad_request": "requisição recusada",
    "reason_other": "erro do provedor",
    "internal_error": "Desculpe, algo deu errado do meu lado. Sua mensagem foi salva.",
    "cmd_memory": "Mostrar o que eu lembro sobre você",
    "cmd_forget": "Apagar minha memória de longo prazo (pergunta antes)",
    "cmd_recall": "Buscar em conversas anteriores: /recall TERMO",
    "memory_empty": "Ainda não tenho memória de longo prazo para este chat.",
    "memory_header": "O que eu lembro (memória de longo prazo):",
    "memory_pending": "{count} sessão(ões) anterior(es) ainda estão sendo salvas na memória.",
    "forget_confirm": (
        "Apagar a memória de longo prazo e o histórico pesquisável deste chat? "
        "Isso não pode ser desfeito."
    ),
    "forget_yes": "Sim, esquecer",
    "forget_no": "Manter",
    "forget_done": "Pronto: memória de longo prazo e histórico apagados.",
    "forget_kept": "Nada foi apagado.",
    "recall_usage": "Escreva o que procurar, por exemplo: /recall migração postgres",
    "recall_too_long": "Essa busca é longa demais; use no máximo {limit} caracteres.",
    "recall_none": "Nada no histórico corresponde a {query!r}.",
    "recall_header": "Melhores resultados para {query!r}:",
    "unknown_command": "Não conheço esse comando. /help mostra o que eu sei fazer.",
    "cmd_usage": "Seus tokens e custos",
    "cmd_stats": "Estatísticas do bot (admins)",
    "usage_title_self": "Seu uso (dias e meses em UTC):",
    "usage_title_user": "Uso do usuário {user_id} (UTC):",
    "usage_title_bot": "Uso do bot inteiro (UTC):",
    "usage_none": "Nenhum uso ainda.",
    "usage_today": "Hoje: {tokens} tokens, {cost}",
    "usage_month": "Este mês: {tokens} tokens, {cost}",
    "usage_line": "  • {model} ({purpose}): {tokens} tokens, {cost}, requisições: {calls}",
    "usage_purpose_chat": "conversa",
    "usage_purpose_consolidation": "memória",
    "usage_memory_note": (
        "Incluído neste mês: {tokens} tokens, {cost} de trabalho de memória em segundo plano "
        "feito para você."
    ),
    "usage_everyone_title": "Todos neste mês (UTC):",
    "usage_everyone_line": (
        "  • {user}: hoje {today_cost}, mês {month_cost} "
        "({month_tokens} tokens, memória {memory_cost})"
    ),
    "usage_bot_total": (
        "Bot inteiro: hoje {today_tokens} tokens, {today_cost}; "
        "este mês {month_tokens} tokens, {month_cost}."
    ),
    "usage_admin_only": "Só admins podem ver o uso de outros usuários.",
    "usage_bad_args": "Use /usage, ou /usage ID_DO_USUÁRIO para ver um usuário (admins).",
    "budget_user_daily": (
        "Você atingiu seu orçamento diário de {limit}, então não enviei esta mensagem a um "
        "modelo. Posso responder de novo amanhã (UTC). Sua memória está guardada."
    ),
    "budget_user_monthly": (
        "Você atingiu seu orçamento mensal de {limit}, então não enviei esta mensagem a um "
        "modelo. Posso responder de novo no mês que vem (UTC). Sua memória está guardada."
    ),
    "budget_bot_daily": (
        "Este bot atingiu seu orçamento diário de {limit}, então não enviei esta mensagem a "
        "um modelo. Tente de novo amanhã (UTC)."
    ),
    "budget_bot_monthly": (
        "Este bot atingiu seu orçamento mensal de {limit}, então não enviei esta mensagem a "
        "um modelo. Tente de novo no mês que vem (UTC)."
    ),
    "rate_limited": (
        "Você está enviando mensagens mais rápido do que este bot permite. Aguarde {seconds} s; "
        "as mensagens enviadas nesse meio-tempo não serão respondidas."
    ),
    "input_too_long": (
        "Sua mensagem é longa demais ({length} caracteres; o limite é {limit}), então não a "
        "li. Por favor, encurte-a."
    ),
    "admin_only": "Este comando é para os admins do bot.",
    "shutting_down": "O bot está reiniciando; envie sua mensagem de novo em um minuto.",
    "reply_interrupted": "(interrompido: o bot reiniciou; pergunte de novo, por favor)",
    "stats_title": "Estatísticas do mnemobot",
    "stats_queue": (
        "Fila da memória: {pending} pendentes, {running} em execução, {done} concluídos"
    ),
    "stats_oldest": "Tarefa mais antiga na espera: desde {at} UTC (há {ago})",
    "stats_failed_jobs": "Tarefas com falha aguardando nova tentativa: {count}",
    "stats_mean_attempts": ("Modelos tentados por tarefa salva: {mean} em média, no máximo {max}"),
    "stats_outcomes": "Resultados da consolidação por modelo, últimos {days} dias:",
    "stats_none": "  (nenhum ainda)",
    "stats_gateways": "Gateways:",
    "stats_gateway": (
        "  • {gateway}: disjuntor {breaker}, falhas seguidas {failures}, "
        "chaves disponíveis {keys_ok}/{keys}"
    ),
    "stats_gateway_off": "  • {gateway}: nenhuma chave configurada",
    "stats_model_breaker": "  • modelo {model}: disjuntor {breaker} ({seconds} s)",
    "stats_spend_today": (
        "Gasto hoje (UTC): {tokens} tokens, {cost} (conversa {chat_cost}, memória {memory_cost})"
    ),
    "stats_turns_in_flight": "Respostas sendo escritas agora: {count}",
}

MESSAGES["id"] = {
    "start": (
        "Halo {name}! Saya mnemobot, asisten obrolan yang mengingat hal-hal penting "
        "dari satu sesi ke sesi berikutnya.\n\nLangsung saja tulis pesan. Perintah:\n{commands}"
    ),
    "help": (
        "Tulis pesan dan saya jawab dengan model obrolan ini, balasannya tampil sambil "
        "ditulis.\n\n{commands}\n\nDi grup, saya menjawab jika di-mention atau jika pesan "
        "saya dibalas."
    ),
    "cmd_start": "Perkenalan bot",
    "cmd_help": "Cara memakai bot",
    "cmd_model": "Pilih model untuk obrolan ini",
    "cmd_new": "Mulai sesi baru",
    "cmd_cancel": "Hentikan balasan yang sedang ditulis",
    "new_session": "Sesi baru dimulai.",
    "not_allowed": (
        "Maaf, ini bot pribadi. ID pengguna Telegram Anda adalah {user_id}; "
        "minta pemiliknya menambahkannya ke ALLOWED_USER_IDS."
    ),
    "text_only": (
        "Maaf, untuk saat ini saya hanya bisa membaca pesan teks. Silakan tulis pesan Anda."
    ),
    "empty_message": "Silakan tulis sesuatu setelah menyebut saya.",
    "model_menu": "Model saat ini: {label}. Pilih model untuk obrolan ini:",
    "model_set": "Model untuk obrolan ini: {label}.",
    "model_unknown": (
        "Model {model_id!r} tidak dikenal. Gunakan /model untuk melihat model yang bisa dipilih."
    ),
    "model_refused": "Model itu tidak tersedia.",
    "model_none": "Tidak ada model yang tersedia: pemilik belum mengatur kunci penyedia apa pun.",
    "tier_frontier": "terdepan",
    "tier_balanced": "seimbang",
    "tier_fast": "cepat",
    "tier_custom": "kustom",
    "nothing_to_cancel": "Tidak ada yang perlu dibatalkan.",
    "cancelled": "Dihentikan.",
    "reply_cancelled": "(dihentikan)",
    "answered_by": "Dijawab oleh {label} (pengganti {requested}).",
    "model_restarted": "{from_label} berhenti menjawab; dilanjutkan dengan {to_label}.",
    "all_models_failed": (
        "Maaf, saat ini tidak ada model yang bisa menjawab ({reason}). Pesan Anda sudah "
        "tersimpan; silakan coba lagi sebentar lagi."
    ),
    "reason_rate_limit": "batas permintaan tercapai",
    "reason_quota": "kuota penyedia habis",
    "reason_auth": "kunci penyedia ditolak",
    "reason_unavailable": "penyedia tidak tersedia",
    "reason_timeout": "waktu habis",
    "reason_empty": "jawaban kosong",
    "reason_bad_request": "permintaan ditolak",
    "reason_other": "galat penyedia",
    "internal_error": "Maaf, terjadi kesalahan di pihak saya. Pesan Anda sudah tersimpan.",
    "cmd_memory": "Tampilkan apa yang saya ingat tentang Anda",
    "cmd_forget": "Hapus memori jangka panjang (ada konfirmasi)",
    "cmd_recall": "Cari di percakapan sebelumnya: /recall KATA_KUNCI",
    "memory_empty": "Belum ada memori jangka panjang untuk obrolan ini.",
    "memory_header": "Yang saya ingat (memori jangka panjang):",
    "memory_pending": "{count} sesi sebelumnya masih sedang disimpan ke memori.",
    "forget_confirm": (
        "Hapus memori jangka panjang dan riwayat yang bisa dicari dari obrolan ini? "
        "Tindakan ini tidak bisa dibatalkan."
    ),
    "forget_yes": "Ya, lupakan",
    "forget_no": "Simpan saja",
    "forget_done": "Selesai: memori jangka panjang dan riwayat sudah dihapus.",
    "forget_kept": "Tidak ada yang dihapus.",
    "recall_usage": "Tulis apa yang dicari, misalnya /recall migrasi postgres",
    "recall_too_long": "Kata kunci terlalu panjang; gunakan paling banyak {limit} karakter.",
    "recall_none": "Tidak ada riwayat yang cocok dengan {query!r}.",
    "recall_header": "Hasil paling cocok untuk {query!r}:",
    "unknown_command": (
        "Saya tidak mengenal perintah itu. /help menampilkan apa yang bisa saya lakukan."
    ),
    "cmd_usage": "Token dan biaya Anda",
    "cmd_stats": "Statistik bot (admin)",
    "usage_title_self": "Pemakaian Anda (hari dan bulan dalam UTC):",
    "usage_title_user": "Pemakaian pengguna {user_id} (UTC):",
    "usage_title_bot": "Pemakaian seluruh bot (UTC):",
    "usage_none": "Belum ada pemakaian.",
    "usage_today": "Hari ini: {tokens} token, {cost}",
    "usage_month": "Bulan ini: {tokens} token, {cost}",
    "usage_line": "  • {model} ({purpose}): {tokens} token, {cost}, permintaan: {calls}",
    "usage_purpose_chat": "obrolan",
    "usage_purpose_consolidation": "memori",
    "usage_memory_note": (
        "Termasuk bulan ini: {tokens} token, {cost} untuk pekerjaan memori di latar belakang "
        "bagi Anda."
    ),
    "usage_everyone_title": "Semua pengguna bulan ini (UTC):",
    "usage_everyone_line": (
        "  • {user}: hari ini {today_cost}, bulan ini {month_cost} "
        "({month_tokens} token, memori {memory_cost})"
    ),
    "usage_bot_total": (
        "Seluruh bot: hari ini {today_tokens} token, {today_cost}; "
        "bulan ini {month_tokens} token, {month_cost}."
    ),
    "usage_admin_only": "Hanya admin yang bisa melihat pemakaian pengguna lain.",
    "usage_bad_args": (
        "Gunakan /usage, atau /usage ID_PENGGUNA untuk melihat satu pengguna (admin)."
    ),
    "budget_user_daily": (
        "Anda sudah mencapai anggaran harian {limit}, jadi pesan ini tidak saya kirim ke "
        "model. Saya bisa menjawab lagi besok (UTC). Memori Anda tetap tersimpan."
    ),
    "budget_user_monthly": (
        "Anda sudah mencapai anggaran bulanan {limit}, jadi pesan ini tidak saya kirim ke "
        "model. Saya bisa menjawab lagi bulan depan (UTC). Memori Anda tetap tersimpan."
    ),
    "budget_bot_daily": (
        "Bot ini sudah mencapai anggaran hariannya sebesar {limit}, jadi pesan ini tidak saya "
        "kirim ke model. Silakan coba lagi besok (UTC)."
    ),
    "budget_bot_monthly": (
        "Bot ini sudah mencapai anggaran bulanannya sebesar {limit}, jadi pesan ini tidak saya "
        "kirim ke model. Silakan coba lagi bulan depan (UTC)."
    ),
    "rate_limited": (
        "Anda mengirim pesan lebih cepat dari yang diizinkan bot ini. Mohon tunggu {seconds} "
        "detik; pesan yang dikirim selama itu tidak akan dijawab."
    ),
    "input_too_long": (
        "Pesan Anda terlalu panjang ({length} karakter; batasnya {limit}), jadi tidak saya "
        "baca. Mohon dipersingkat."
    ),
    "admin_only": "Perintah ini khusus untuk admin bot.",
    "shutting_down": "Bot sedang dimulai ulang; silakan kirim pesan Anda lagi sebentar lagi.",
    "reply_interrupted": "(terputus: bot dimulai ulang; silakan tanyakan lagi)",
    "stats_title": "Statistik mnemobot",
    "stats_queue": "Antrean memori: {pending} menunggu, {running} berjalan, {done} selesai",
    "stats_oldest": "Tugas tertua yang menunggu: sejak {at} UTC ({ago} yang lalu)",
    "stats_failed_jobs": "Tugas gagal yang menunggu dicoba ulang: {count}",
    "stats_mean_attempts": (
        "Model yang dicoba per tugas tersimpan: rata-rata {mean}, paling banyak {max}"
    ),
    "stats_outcomes": "Hasil konsolidasi per model, {days} hari terakhir:",
    "stats_none": "  (belum ada)",
    "stats_gateways": "Gateway:",
    "stats_gateway": (
        "  • {gateway}: pemutus {breaker}, gagal beruntun {failures}, "
        "kunci tersedia {keys_ok}/{keys}"
    ),
    "stats_gateway_off": "  • {gateway}: tidak ada kunci",
    "stats_model_breaker": "  • model {model}: pemutus {breaker} ({seconds} dtk)",
    "stats_spend_today": (
        "Biaya hari ini (UTC): {tokens} token, {cost} (obrolan {chat_cost}, memori {memory_cost})"
    ),
    "stats_turns_in_flight": "Balasan yang sedang ditulis: {count}",
}

MESSAGES["tr"] = {
    "start": (
        "Merhaba {name}! Ben mnemobot; oturumlar arasında önemli olanı hatırlayan bir sohbet "
        "asistanıyım.\n\nBana yazman yeterli. Komutlar:\n{commands}"
    ),
    "help": (
        "Bir mesaj yaz; bu sohbetin modeliyle yanıtlayayım, yanıt yazıldıkça görünür."
        "\n\n{commands}\n\nGruplarda, bahsedildiğimde ya da mesajıma yanıt verildiğinde "
        "yanıtlarım."
    ),
    "cmd_start": "Botu tanıt",
    "cmd_help": "Bot nasıl kullanılır",
    "cmd_model": "Bu sohbetin modelini seç",
    "cmd_new": "Yeni oturum başlat",
    "cmd_cancel": "Yazılmakta olan yanıtı durdur",
    "new_session": "Yeni oturum başladı.",
    "not_allowed": (
        "Üzgünüm, bu özel bir bot. Telegram kullanıcı kimliğin {user_id}; "
        "sahibinden bunu ALLOWED_USER_IDS listesine eklemesini iste."
    ),
    "text_only": (
        "Üzgünüm, şimdilik yalnızca metin mesajlarını okuyabiliyorum. Lütfen mesajını yaz."
    ),
    "empty_message": "Lütfen benden bahsettikten sonra bir şey yaz.",
    "model_menu": "Şu anki model: {label}. Bu sohbet için bir model seç:",
    "model_set": "Bu sohbetin modeli: {label}.",
    "model_unknown": (
        "Bilinmeyen model {model_id!r}. Seçebileceğin modelleri görmek için /model kullan."
    ),
    "model_refused": "Bu model kullanılamıyor.",
    "model_none": "Kullanılabilir model yok: bot sahibi hiçbir sağlayıcı anahtarı ayarlamamış.",
    "tier_frontier": "en gelişmiş",
    "tier_balanced": "dengeli",
    "tier_fast": "hızlı",
    "tier_custom": "özel",
    "nothing_to_cancel": "İptal edilecek bir şey yok.",
    "cancelled": "Durduruldu.",
    "reply_cancelled": "(durduruldu)",
    "answered_by": "{label} yanıtladı ({requested} yerine).",
    "model_restarted": "{from_label} yanıt vermeyi bıraktı; {to_label} ile devam ediliyor.",
    "all_models_failed": (
        "Üzgünüm, şu anda hiçbir model yanıt veremedi ({reason}). Mesajın kaydedildi; "
        "lütfen bir dakika sonra tekrar dene."
    ),
    "reason_rate_limit": "istek sınırına takıldı",
    "reason_quota": "sağlayıcı kotası doldu",
    "reason_auth": "sağlayıcı anahtarı reddedildi",
    "reason_unavailable": "sağlayıcıya ulaşılamıyor",
    "reason_timeout": "zaman aşımı",
    "reason_empty": "boş yanıt",
    "reason_bad_request": "istek reddedildi",
    "reason_other": "sağlayıcı hatası",
    "internal_error": "Üzgünüm, benim tarafımda bir şeyler ters gitti. Mesajın kaydedildi.",
    "cmd_memory": "Senin hakkında hatırladıklarımı göster",
    "cmd_forget": "Uzun süreli belleğimi sil (önce sorar)",
    "cmd_recall": "Geçmiş sohbetlerde ara: /recall SORGU",
    "memory_empty": "Bu sohbet için henüz uzun süreli belleğim yok.",
    "memory_header": "Hatırladıklarım (uzun süreli bellek):",
    "memory_pending": "Önceki {count} oturum hâlâ belleğe kaydediliyor.",
    "forget_confirm": (
        "Bu sohbetin uzun süreli belleği ve aranabilir geçmişi silinsin mi? Bu işlem geri alınamaz."
    ),
    "forget_yes": "Evet, unut",
    "forget_no": "Kalsın",
    "forget_done": "Tamam: uzun süreli bellek ve geçmiş silindi.",
    "forget_kept": "Hiçbir şey silinmedi.",
    "recall_usage": "Ne aradığını yaz, örneğin /recall postgres geçişi",
    "recall_too_long": "Bu sorgu çok uzun; en fazla {limit} karakter kullan.",
    "recall_none": "Geçmişte {query!r} ile eşleşen bir şey yok.",
    "recall_header": "{query!r} için en iyi eşleşmeler:",
    "unknown_command": "Bu komutu bilmiyorum. /help neler yapabileceğimi listeler.",
    "cmd_usage": "Token kullanımın ve maliyetin",
    "cmd_stats": "Bot istatistikleri (yöneticiler)",
    "usage_title_self": "Kullanımın (gün ve aylar UTC'ye göre):",
    "usage_title_user": "{user_id} kullanıcısının kullanımı (UTC):",
    "usage_title_bot": "Tüm botun kullanımı (UTC):",
    "usage_none": "Henüz kullanım yok.",
    "usage_today": "Bugün: {tokens} token, {cost}",
    "usage_month": "Bu ay: {tokens} token, {cost}",
    "usage_line": "  • {model} ({purpose}): {tokens} token, {cost}, istek sayısı: {calls}",
    "usage_purpose_chat": "sohbet",
    "usage_purpose_consolidation": "bellek",
    "usage_memory_note": (
        "Bu aya dahil: senin için arka planda yapılan bellek işi, {tokens} token, {cost}."
    ),
    "usage_everyone_title": "Bu ay herkes (UTC):",
    "usage_everyone_line": (
        "  • {user}: bugün {today_cost}, bu ay {month_cost} "
        "({month_tokens} token, bellek {memory_cost})"
    ),
    "usage_bot_total": (
        "Tüm bot: bugün {today_tokens} token, {today_cost}; "
        "bu ay {month_tokens} token, {month_cost}."
    ),
    "usage_admin_only": "Diğer kullanıcıların kullanımını yalnızca yöneticiler görebilir.",
    "usage_bad_args": (
        "/usage kullan ya da tek bir kullanıcı için /usage KULLANICI_ID (yöneticiler)."
    ),
    "budget_user_daily": (
        "Günlük {limit} bütçene ulaştın, bu yüzden bu mesajı bir modele göndermedim. "
        "Yarın (UTC) yeniden yanıt verebilirim. Belleğin korunuyor."
    ),
    "budget_user_monthly": (
        "Aylık {limit} bütçene ulaştın, bu yüzden bu mesajı bir modele göndermedim. "
        "Gelecek ay (UTC) yeniden yanıt verebilirim. Belleğin korunuyor."
    ),
    "budget_bot_daily": (
        "Bu bot günlük {limit} bütçesine ulaştı, bu yüzden bu mesajı bir modele göndermedim. "
        "Lütfen yarın (UTC) tekrar dene."
    ),
    "budget_bot_monthly": (
        "Bu bot aylık {limit} bütçesine ulaştı, bu yüzden bu mesajı bir modele göndermedim. "
        "Lütfen gelecek ay (UTC) tekrar dene."
    ),
    "rate_limited": (
        "Bu botun izin verdiğinden daha hızlı mesaj gönderiyorsun. Lütfen {seconds} sn bekle; "
        "bu sürede gönderilen mesajlar yanıtlanmaz."
    ),
    "input_too_long": (
        "Mesajın çok uzun ({length} karakter; sınır {limit}), bu yüzden okumadım. Lütfen kısalt."
    ),
    "admin_only": "Bu komut botun yöneticileri içindir.",
    "shutting_down": "Bot yeniden başlatılıyor; lütfen mesajını bir dakika sonra tekrar gönder.",
    "reply_interrupted": "(yarıda kesildi: bot yeniden başladı; lütfen tekrar sor)",
    "stats_title": "mnemobot istatistikleri",
    "stats_queue": ("Bellek kuyruğu: {pending} bekliyor, {running} çalışıyor, {done} tamamlandı"),
    "stats_oldest": "En eski bekleyen iş: {at} UTC'den beri ({ago} önce)",
    "stats_failed_jobs": "Yeniden denenmeyi bekleyen başarısız işler: {count}",
    "stats_mean_attempts": ("Kaydedilen iş başına denenen model: ortalama {mean}, en fazla {max}"),
    "stats_outcomes": "Model başına birleştirme sonuçları, son {days} gün:",
    "stats_none": "  (henüz yok)",
    "stats_gateways": "Ağ geçitleri:",
    "stats_gateway": (
        "  • {gateway}: devre kesici {breaker}, art arda hata {failures}, "
        "kullanılabilir anahtar {keys_ok}/{keys}"
    ),
    "stats_gateway_off": "  • {gateway}: anahtar ayarlı değil",
    "stats_model_breaker": "  • model {model}: devre kesici {breaker} ({seconds} sn)",
    "stats_spend_today": (
        "Bugünkü harcama (UTC): {tokens} token, {cost} (sohbet {chat_cost}, bellek {memory_cost})"
    ),
    "stats_turns_in_flight": "Şu anda yazılan yanıtlar: {count}",
}

MESSAGES["ja"] = {
    "start": (
        "こんにちは、{name}さん！mnemobot です。セッションをまたいで大事なことを覚えておく"
        "チャットアシスタントです。\n\n気軽にメッセージを送ってください。コマンド:\n{commands}"
    ),
    "help": (
        "メッセージを送ると、このチャットのモデルが返信します。返信は書かれていく様子がそのまま"
        "表示されます。\n\n{commands}\n\nグループでは、メンションされたときか、私のメッセージに"
        "返信されたときに答えます。"
    ),
    "cmd_start": "ボットの紹介",
    "cmd_help": "ボットの使い方",
    "cmd_model": "このチャットのモデルを選ぶ",
    "cmd_new": "新しいセッションを始める",
    "cmd_cancel": "書いている途中の返信を止める",
    "new_session": "新しいセッションを開始しました。",
    "not_allowed": (
        "申し訳ありません、これは非公開のボットです。あなたの Telegram ユーザー ID は "
        "{user_id} です。オーナーに ALLOWED_USER_IDS への追加を依頼してください。"
    ),
    "text_only": (
        "申し訳ありません、今のところテキストメッセージしか読めません。文章で送ってください。"
    ),
    "empty_message": "メンションの後に何か書いてください。",
    "model_menu": "現在のモデル: {label}。このチャットのモデルを選んでください:",
    "model_set": "このチャットのモデル: {label}。",
    "model_unknown": (
        "{model_id!r} というモデルはありません。/model で選べるモデルを確認してください。"
    ),
    "model_refused": "そのモデルは利用できません。",
    "model_none": "利用できるモデルがありません。オーナーがプロバイダーのキーを設定していません。",
    "tier_frontier": "最上位",
    "tier_balanced": "バランス",
    "tier_fast": "高速",
    "tier_custom": "カスタム",
    "nothing_to_cancel": "止めるものはありません。",
    "cancelled": "止めました。",
    "reply_cancelled": "（中止しました）",
    "answered_by": "{label} が回答しました（{requested} の代わり）。",
    "model_restarted": "{from_label} が応答しなくなったため、{to_label} で続けます。",
    "all_models_failed": (
        "申し訳ありません、今はどのモデルも回答できませんでした（{reason}）。メッセージは"
        "保存してあります。1 分ほどしてからもう一度お試しください。"
    ),
    "reason_rate_limit": "レート制限",
    "reason_quota": "プロバイダーの利用枠の超過",
    "reason_auth": "プロバイダーのキーが拒否された",
    "reason_unavailable": "プロバイダーが利用不可",
    "reason_timeout": "タイムアウト",
    "reason_empty": "空の回答",
    "reason_bad_request": "リクエストが拒否された",
    "reason_other": "プロバイダーのエラー",
    "internal_error": (
        "申し訳ありません、こちら側で問題が起きました。メッセージは保存してあります。"
    ),
    "cmd_memory": "あなたについて覚えていることを表示",
    "cmd_forget": "長期記憶を消去（確認あり）",
    "cmd_recall": "過去の会話を検索: /recall キーワード",
    "memory_empty": "このチャットの長期記憶はまだありません。",
    "memory_header": "覚えていること（長期記憶）:",
    "memory_pending": "以前のセッション {count} 件を記憶に保存している最中です。",
    "forget_confirm": (
        "このチャットの長期記憶と検索できる履歴を消去しますか？この操作は元に戻せません。"
    ),
    "forget_yes": "はい、忘れる",
    "forget_no": "残す",
    "forget_done": "完了: 長期記憶と履歴を消去しました。",
    "forget_kept": "何も消去していません。",
    "recall_usage": "探したい内容を書いてください。例: /recall postgres 移行",
    "recall_too_long": "検索語が長すぎます。{limit} 文字以内にしてください。",
    "recall_none": "履歴に {query!r} に一致するものはありません。",
    "recall_header": "{query!r} に最も近い結果:",
    "unknown_command": "そのコマンドはわかりません。/help でできることを確認できます。",
    "cmd_usage": "あなたのトークン数と費用",
    "cmd_stats": "ボットの統計（管理者）",
    "usage_title_self": "あなたの利用状況（日・月は UTC 基準）:",
    "usage_title_user": "ユーザー {user_id} の利用状況（UTC）:",
    "usage_title_bot": "ボット全体の利用状況（UTC）:",
    "usage_none": "まだ利用はありません。",
    "usage_today": "今日: {tokens} トークン、{cost}",
    "usage_month": "今月: {tokens} トークン、{cost}",
    "usage_line": "  • {model}（{purpose}）: {tokens} トークン、{cost}、リクエスト数: {calls}",
    "usage_purpose_chat": "チャット",
    "usage_purpose_consolidation": "記憶",
    "usage_memory_note": (
        "今月分に含まれるもの: あなたのためにバックグラウンドで行った記憶処理 "
        "{tokens} トークン、{cost}。"
    ),
    "usage_everyone_title": "今月の全ユーザー（UTC）:",
    "usage_everyone_line": (
        "  • {user}: 今日 {today_cost}、今月 {month_cost}"
        "（{month_tokens} トークン、記憶 {memory_cost}）"
    ),
    "usage_bot_total": (
        "ボット全体: 今日 {today_tokens} トークン、{today_cost}／"
        "今月 {month_tokens} トークン、{month_cost}。"
    ),
    "usage_admin_only": "他のユーザーの利用状況を見られるのは管理者だけです。",
    "usage_bad_args": (
        "/usage を使うか、特定のユーザーは /usage ユーザーID で確認できます（管理者）。"
    ),
    "budget_user_daily": (
        "1 日の予算 {limit} に達したため、このメッセージはモデルに送っていません。"
        "明日（UTC）からまた回答できます。記憶はそのまま残ります。"
    ),
    "budget_user_monthly": (
        "月の予算 {limit} に達したため、このメッセージはモデルに送っていません。"
        "来月（UTC）からまた回答できます。記憶はそのまま残ります。"
    ),
    "budget_bot_daily": (
        "このボットは 1 日の予算 {limit} に達したため、このメッセージはモデルに送っていません。"
        "明日（UTC）もう一度お試しください。"
    ),
    "budget_bot_monthly": (
        "このボットは月の予算 {limit} に達したため、このメッセージはモデルに送っていません。"
        "来月（UTC）もう一度お試しください。"
    ),
    "rate_limited": (
        "このボットで許可されている速さを超えてメッセージが送られています。{seconds} 秒"
        "お待ちください。その間に送られたメッセージには返信しません。"
    ),
    "input_too_long": (
        "メッセージが長すぎるため読んでいません（{length} 文字、上限は {limit} 文字）。"
        "短くしてください。"
    ),
    "admin_only": "このコマンドはボットの管理者専用です。",
    "shutting_down": "ボットを再起動しています。1 分ほどしてからもう一度送ってください。",
    "reply_interrupted": "（中断: ボットが再起動しました。もう一度質問してください）",
    "stats_title": "mnemobot の統計",
    "stats_queue": "記憶キュー: 待機 {pending}、実行中 {running}、完了 {done}",
    "stats_oldest": "最も古い待機ジョブ: {at} UTC から（{ago} 前）",
    "stats_failed_jobs": "再試行待ちの失敗ジョブ: {count}",
    "stats_mean_attempts": "保存できたジョブあたりの試行モデル数: 平均 {mean}、最大 {max}",
    "stats_outcomes": "モデルごとの記憶統合の結果（直近 {days} 日）:",
    "stats_none": "  （まだありません）",
    "stats_gateways": "ゲートウェイ:",
    "stats_gateway": (
        "  • {gateway}: ブレーカー {breaker}、連続失敗 {failures}、利用可能なキー {keys_ok}/{keys}"
    ),
    "stats_gateway_off": "  • {gateway}: キー未設定",
    "stats_model_breaker": "  • モデル {model}: ブレーカー {breaker}（{seconds} 秒）",
    "stats_spend_today": (
        "今日の支出（UTC）: {tokens} トークン、{cost}（チャット {chat_cost}、記憶 {memory_cost}）"
    ),
    "stats_turns_in_flight": "現在書いている返信: {count}",
}


def normalise_language(code: str | None) -> str:
    """Telegram sends IETF tags such as 'pt-br'; keep the primary subtag if we speak it."""
    if not code:
        return "en"
    primary = code.split("-")[0].split("_")[0].lower()
    return primary if primary in SUPPORTED_LANGUAGES else "en"


def t(key: str, lang: str | None = None, **values: object) -> str:
    """The message `key` in `lang` (falling back to English), formatted with `values`."""
    language = normalise_language(lang)
    template = MESSAGES.get(language, {}).get(key) or MESSAGES["en"][key]
    return template.format(**values) if values else template


# Media: voice notes, photos, documents (issue 11). Kept together so the keys travel as one.
_MEDIA_MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "usage_purpose_transcription": "transcription",
        "voice_too_long": (
            "This recording is {seconds} s long; I transcribe up to {limit} s. "
            "Please send a shorter one."
        ),
        "file_too_big": "This file is {size}; I can read files up to {limit}.",
        "transcript_heading": "🎙 Transcript:",
        "transcript_empty": "I could not make out any words in this recording.",
        "transcription_failed": (
            "I could not transcribe this recording ({reason}). It is kept: tap Retry, "
            "or send it again later."
        ),
        "retry_button": "Retry",
        "retry_gone": "This recording was already handled or is no longer available.",
        "download_failed": "I could not download this file from Telegram. Please send it again.",
        "vision_unsupported": (
            "{label} cannot see images. Models that can: {models}. Tap one below to switch, "
            "then send the photo again."
        ),
        "vision_none": "None of the available models can see images, so I cannot read photos.",
        "document_unsupported": (
            "I cannot read this kind of file ({name}). I read PDF, plain text, markdown, code "
            "and CSV files."
        ),
        "document_no_text": (
            "This PDF has no text layer (it looks like scanned pages or images), so there is "
            "nothing I can read in it. Send the text itself, or photos of the pages."
        ),
        "document_unreadable": "I could not read this PDF: it is damaged or password-protected.",
        "document_binary": "This file does not look like text, so I cannot read it.",
        "document_empty": "This file is empty.",
        "document_trimmed": (
            "Note: {name} is long. I read about {kept} of its {total} tokens; "
            "the middle part was cut."
        ),
        "text_only": (
            "Sorry, I cannot read this kind of message. I read text, voice messages, photos "
            "and documents (PDF, text, code, CSV)."
        ),
    },
    "pt": {
        "usage_purpose_transcription": "transcrição",
        "voice_too_long": (
            "Esta gravação tem {seconds} s; eu transcrevo até {limit} s. "
            "Envie uma mais curta, por favor."
        ),
        "file_too_big": "Este arquivo tem {size}; consigo ler arquivos de até {limit}.",
        "transcript_heading": "🎙 Transcrição:",
        "transcript_empty": "Não consegui distinguir nenhuma palavra nesta gravação.",
        "transcription_failed": (
            "Não consegui transcrever esta gravação ({reason}). Ela foi guardada: toque em "
            "Tentar de novo, ou envie-a novamente mais tarde."
        ),
        "retry_button": "Tentar de novo",
        "retry_gone": "Esta gravação já foi tratada ou não está mais disponível.",
        "download_failed": "Não consegui baixar este arquivo do Telegram. Envie-o novamente.",
        "vision_unsupported": (
            "{label} não consegue ver imagens. Modelos que conseguem: {models}. Toque em um "
            "abaixo para trocar e envie a foto de novo."
        ),
        "vision_none": "Nenhum dos modelos disponíveis vê imagens, então não consigo ler fotos.",
        "document_unsupported": (
            "Não consigo ler este tipo de arquivo ({name}). Leio PDF, texto simples, markdown, "
            "código e CSV."
        ),
        "document_no_text": (
            "Este PDF não tem camada de texto (parecem páginas digitalizadas ou imagens), então "
            "não há nada que eu possa ler nele. Envie o próprio texto ou fotos das páginas."
        ),
        "document_unreadable": (
            "Não consegui ler este PDF: ele está danificado ou protegido por senha."
        ),
        "document_binary": "Este arquivo não parece ser texto, então não consigo lê-lo.",
        "document_empty": "Este arquivo está vazio.",
        "document_trimmed": (
            "Observação: {name} é longo. Li cerca de {kept} dos seus {total} tokens; "
            "a parte do meio foi cortada."
        ),
        "text_only": (
            "Desculpe, não consigo ler este tipo de mensagem. Leio texto, mensagens de voz, "
            "fotos e documentos (PDF, texto, código, CSV)."
        ),
    },
    "id": {
        "usage_purpose_transcription": "transkripsi",
        "voice_too_long": (
            "Rekaman ini berdurasi {seconds} dtk; saya mentranskripsi hingga {limit} dtk. "
            "Silakan kirim yang lebih pendek."
        ),
        "file_too_big": "Ukuran file ini {size}; saya bisa membaca file hingga {limit}.",
        "transcript_heading": "🎙 Transkrip:",
        "transcript_empty": "Saya tidak dapat menangkap kata apa pun dalam rekaman ini.",
        "transcription_failed": (
            "Saya tidak dapat mentranskripsi rekaman ini ({reason}). Rekaman disimpan: ketuk "
            "Coba lagi, atau kirim ulang nanti."
        ),
        "retry_button": "Coba lagi",
        "retry_gone": "Rekaman ini sudah ditangani atau tidak tersedia lagi.",
        "download_failed": (
            "Saya tidak dapat mengunduh file ini dari Telegram. Silakan kirim ulang."
        ),
        "vision_unsupported": (
            "{label} tidak dapat melihat gambar. Model yang bisa: {models}. Ketuk salah satu di "
            "bawah untuk beralih, lalu kirim fotonya lagi."
        ),
        "vision_none": (
            "Tidak ada model tersedia yang dapat melihat gambar, jadi saya tidak bisa membaca foto."
        ),
        "document_unsupported": (
            "Saya tidak dapat membaca jenis file ini ({name}). Saya membaca PDF, teks biasa, "
            "markdown, kode, dan CSV."
        ),
        "document_no_text": (
            "PDF ini tidak memiliki lapisan teks (tampaknya hasil pindaian atau gambar), jadi "
            "tidak ada yang bisa saya baca. Kirim teksnya langsung, atau foto halamannya."
        ),
        "document_unreadable": (
            "Saya tidak dapat membaca PDF ini: file rusak atau dilindungi kata sandi."
        ),
        "document_binary": "File ini tidak tampak seperti teks, jadi saya tidak bisa membacanya.",
        "document_empty": "File ini kosong.",
        "document_trimmed": (
            "Catatan: {name} panjang. Saya membaca sekitar {kept} dari {total} token; "
            "bagian tengahnya dipotong."
        ),
        "text_only": (
            "Maaf, saya tidak dapat membaca jenis pesan ini. Saya membaca teks, pesan suara, "
            "foto, dan dokumen (PDF, teks, kode, CSV)."
        ),
    },
    "tr": {
        "usage_purpose_transcription": "yazıya dökme",
        "voice_too_long": (
            "Bu kayıt {seconds} sn uzunluğunda; en fazla {limit} sn yazıya dökebiliyorum. "
            "Lütfen daha kısa bir kayıt gönderin."
        ),
        "file_too_big": "Bu dosya {size}; en fazla {limit} boyutundaki dosyaları okuyabilirim.",
        "transcript_heading": "🎙 Döküm:",
        "transcript_empty": "Bu kayıtta hiçbir kelime seçemedim.",
        "transcription_failed": (
            "Bu kaydı yazıya dökemedim ({reason}). Kayıt saklandı: Tekrar dene'ye dokunun "
            "ya da daha sonra yeniden gönderin."
        ),
        "retry_button": "Tekrar dene",
        "retry_gone": "Bu kayıt zaten işlendi ya da artık mevcut değil.",
        "download_failed": "Bu dosyayı Telegram'dan indiremedim. Lütfen yeniden gönderin.",
        "vision_unsupported": (
            "{label} görüntüleri göremez. Görebilen modeller: {models}. Geçmek için aşağıdan "
            "birine dokunun, sonra fotoğrafı yeniden gönderin."
        ),
        "vision_none": (
            "Mevcut modellerin hiçbiri görüntü göremiyor, bu yüzden fotoğrafları okuyamıyorum."
        ),
        "document_unsupported": (
            "Bu tür bir dosyayı okuyamıyorum ({name}). PDF, düz metin, markdown, kod ve CSV "
            "dosyalarını okurum."
        ),
        "document_no_text": (
            "Bu PDF'in metin katmanı yok (taranmış sayfalar ya da görüntüler gibi görünüyor), "
            "bu yüzden okuyabileceğim bir şey yok. Metnin kendisini ya da sayfaların "
            "fotoğraflarını gönderin."
        ),
        "document_unreadable": "Bu PDF'i okuyamadım: dosya bozuk ya da parola korumalı.",
        "document_binary": "Bu dosya metne benzemiyor, bu yüzden okuyamıyorum.",
        "document_empty": "Bu dosya boş.",
        "document_trimmed": (
            "Not: {name} uzun. {total} token'ın yaklaşık {kept} kadarını okudum; "
            "orta kısım kesildi."
        ),
        "text_only": (
            "Üzgünüm, bu tür bir mesajı okuyamıyorum. Metin, sesli mesaj, fotoğraf ve belge "
            "(PDF, metin, kod, CSV) okurum."
        ),
    },
    "ja": {
        "usage_purpose_transcription": "文字起こし",
        "voice_too_long": (
            "この録音は {seconds} 秒あります。文字起こしできるのは {limit} 秒までです。"
            "もっと短いものを送ってください。"
        ),
        "file_too_big": "このファイルは {size} です。読めるのは {limit} までのファイルです。",
        "transcript_heading": "🎙 文字起こし:",
        "transcript_empty": "この録音からは言葉を聞き取れませんでした。",
        "transcription_failed": (
            "この録音を文字起こしできませんでした（{reason}）。録音は保存してあります。"
            "「再試行」を押すか、あとでもう一度送ってください。"
        ),
        "retry_button": "再試行",
        "retry_gone": "この録音はすでに処理済みか、もう利用できません。",
        "download_failed": (
            "Telegram からこのファイルをダウンロードできませんでした。もう一度送ってください。"
        ),
        "vision_unsupported": (
            "{label} は画像を見られません。画像を見られるモデル: {models}。下のボタンで"
            "切り替えてから、写真をもう一度送ってください。"
        ),
        "vision_none": "利用できるモデルはどれも画像を見られないため、写真は読めません。",
        "document_unsupported": (
            "この種類のファイル（{name}）は読めません。読めるのは PDF、テキスト、Markdown、"
            "コード、CSV です。"
        ),
        "document_no_text": (
            "この PDF にはテキストレイヤーがありません（スキャンしたページや画像のようです）。"
            "読める内容がないため、テキストそのものか、ページの写真を送ってください。"
        ),
        "document_unreadable": (
            "この PDF は読めませんでした。壊れているか、パスワードで保護されています。"
        ),
        "document_binary": "このファイルはテキストではないようなので、読めません。",
        "document_empty": "このファイルは空です。",
        "document_trimmed": (
            "注: {name} は長いため、{total} トークンのうち約 {kept} トークンを読みました。"
            "中間部分は省略しています。"
        ),
        "text_only": (
            "すみません、この種類のメッセージは読めません。読めるのはテキスト、"
            "ボイスメッセージ、写真、文書（PDF、テキスト、コード、CSV）です。"
        ),
    },
}
for _lang, _texts in _MEDIA_MESSAGES.items():
    MESSAGES[_lang].update(_texts)
