"""The table's rows for content credentials: whether every output is signed (C2PA), and the certificate it is
signed with when an organisation brings its own instead of this install's key. Environment only: the worker,
the long-form runner and the API's encoders all sign, and each reads the same variables."""

from __future__ import annotations

from pathlib import Path

from cosyvoice_mac.settings.setting import ENV, Setting

CREDENTIAL_ROWS = (
    Setting(
        "content_credentials",
        "0: save outputs without C2PA content credentials (by default every WAV, FLAC and MP3 the app makes is "
        "signed with the claim that it is AI-generated, the model, the engine, the time and the voice's hash)",
        "0：保存输出时不加 C2PA 内容凭证（默认每个生成的 WAV、FLAC、MP3 都带签名：声明为 AI 生成，并记录模型、"
        "引擎、时间和声音的哈希）",
        default=True,
        type=bool,
        env="COSYVOICE_CONTENT_CREDENTIALS",
        doors=(ENV,),
        group="credentials",
    ),
    Setting(
        "signing_cert",
        "an organisation's signing certificate chain (PEM: the signing certificate first, then its "
        "intermediates) to sign content credentials with, instead of the key this install makes on first use; "
        "COSYVOICE_SIGNING_KEY names its private key",
        "用于签署内容凭证的机构证书链（PEM：签名证书在前，其后是中间证书），代替本机首次使用时生成的密钥；"
        "私钥由 COSYVOICE_SIGNING_KEY 指定",
        type=Path,
        env="COSYVOICE_SIGNING_CERT",
        default_words="this install's own certificate",
        doors=(ENV,),
        group="credentials",
    ),
    Setting(
        "signing_key",
        "the private key (PEM; EC P-256/384/521, Ed25519 or RSA) of the signing certificate chain",
        "机构签名证书链对应的私钥（PEM；EC P-256/384/521、Ed25519 或 RSA）",
        type=Path,
        env="COSYVOICE_SIGNING_KEY",
        default_words="this install's own key",
        doors=(ENV,),
        group="credentials",
    ),
)
