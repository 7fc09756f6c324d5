"""What every command of the CLI shares: exit codes, the argument groups, and how flags map to settings.

Torch-free and light: each command module imports this, never another command's module.
"""

from __future__ import annotations

from cosyvoice_mac.errors import CosyVoiceError
from cosyvoice_mac.request import SAMPLING_FIELDS, PostSettings
from cosyvoice_mac.settings import add_argument, flag_default, setting

EXIT_FAILED = 1  # the app or its model failed on the job (not the request's fault); the message says why
EXIT_REFUSED = 2  # the request was refused (bad input, unknown voice, missing key); the message says what to change
EXIT_NOT_SAVED = 73  # sysexits' EX_CANTCREAT: the audio was made (and --out written) but outputs/ could not keep it
# sysexits' EX_TEMPFAIL: the app's queue is full, its model loads, or its model process crashed and was restarted:
# the same command works later
EXIT_TRY_LATER = 75
EXIT_INTERRUPTED = 130  # the shell's code for a command ended by Ctrl-C
EXIT_CODES_HELP = (
    f"Exit codes: 0 done; {EXIT_FAILED} the app or its model failed (the message says why); {EXIT_REFUSED} "
    f"refused (the message says what to change); {EXIT_NOT_SAVED} made and written to --out, but not saved in "
    f"the app's outputs/ (full or read-only: the message says why); {EXIT_TRY_LATER} try again later (the "
    f"app's queue is full, its model is loading, or its model process crashed and restarted); "
    f"{EXIT_INTERRUPTED} cancelled with Ctrl-C."
)


class CommandFailed(CosyVoiceError):
    """A command's failure, said to the user in the message, with the exit code it ends with."""

    def __init__(self, message: str, exit_code: int = EXIT_REFUSED):
        super().__init__(message)
        self.exit_code = exit_code


def exit_code_for_error(error_type: str | None, retry_after: str | None = None) -> int:
    """The exit code for an error the app answered (its OpenAI ``error.type``, over HTTP or in a stream's
    ``error`` event): try later when the app says a retry will work (a full queue, or a server fault with
    ``Retry-After``), failed for another fault of the server, refused for the request's own."""
    if error_type == "rate_limit_error" or (error_type == "server_error" and retry_after):
        return EXIT_TRY_LATER
    return EXIT_FAILED if error_type == "server_error" else EXIT_REFUSED


def exit_code_for_fault(fault: str) -> int:
    """The exit code for a job of the CLI's own engine that failed with ``fault`` (``engine.messages.Fault``)."""
    from cosyvoice_mac.engine.messages import Fault

    if fault == Fault.INPUT:
        return EXIT_REFUSED
    return EXIT_TRY_LATER if fault in Fault.RETRYABLE else EXIT_FAILED


# The request contract's fields -> the flags that set them, so a refusal names what the user typed.
CONTRACT_FLAGS = {
    "text": "--text",
    "transcript": "--prompt-text",
    "instruct": "--instruct",
    "mode": "--instruct",
    "seed": "--seed",
    "speed": "--speed",
    "voice": "--prompt-wav/--voice",
    "trim": "--trim",
    "loudness_lufs": "--loudness",
    "post": "--loudness",
    "prompt_audio": "--prompt-wav",
    **{name: setting(name).flag for name in SAMPLING_FIELDS},  # --temperature, --top-p, --top-k, ...
    "style": "--style",
}

# The settings that say how the model is built, so the app's own settings rule when the job goes there.
LOCAL_ONLY = ("device", "precision", "dtype", "llm_dtype", "flow_dtype", "reprobe", "engine", "vocoder")
LOCAL_ONLY += ("compute_units", "outputs_dir")


def local_only_flags() -> dict[str, tuple[str, object]]:
    """flag -> (argument, value when not given) of LOCAL_ONLY, for ``cli.remote.note_local_only``."""
    return {setting(name).flag: (name, flag_default(name)) for name in LOCAL_ONLY}


def add_app_arguments(parser) -> None:
    """--server, --local, --api-key: where the work runs (``cli.remote.connect``)."""
    where = parser.add_mutually_exclusive_group()
    add_argument(where, "server")
    add_argument(where, "local")
    add_argument(parser, "api_key")


def add_precision_arguments(parser) -> None:
    """--precision, --dtype (the LLM's), --llm-dtype, --flow-dtype, --reprobe: the CLI's and the app's."""
    for name in ("precision", "dtype", "llm_dtype", "flow_dtype", "reprobe"):
        add_argument(parser, name)


def add_model_arguments(parser, vocoder: bool = False) -> None:
    """--device, the precision group, --engine (and --vocoder, --compute-units): how this process builds the
    model; without ``vocoder`` the command runs the torch vocoder."""
    add_argument(parser, "device")
    add_precision_arguments(parser)
    add_argument(parser, "engine")
    if vocoder:
        add_argument(parser, "vocoder")
        add_argument(parser, "compute_units")
    else:
        parser.set_defaults(vocoder=flag_default("vocoder"), compute_units=flag_default("compute_units"))


def precision_kwargs(args) -> dict:
    return {
        "precision": args.precision,
        "dtype": args.dtype,
        "llm_dtype": args.llm_dtype,
        "flow_dtype": args.flow_dtype,
        "reprobe": args.reprobe,
    }


def host_precision(args) -> dict:
    """The precision choices the app's model host passes to the pipeline (the LLM's dtype travels apart)."""
    return {key: value for key, value in precision_kwargs(args).items() if key != "dtype" and value}


def host_vocoder(args) -> str:
    """--vocoder and --compute-units as the model host's choice (``engine.host.VOCODER_CHOICES``)."""
    return "torch" if args.vocoder == "torch" else f"coreml:{args.compute_units}"


def add_post_arguments(parser) -> None:
    """--trim and --loudness LUFS (off by default): the long-form commands', ``synth``'s and ``convert``'s."""
    add_argument(parser, "trim")
    add_argument(parser, "loudness_lufs", dest="loudness")


def post_settings(args) -> PostSettings:
    return PostSettings(trim=args.trim, loudness_lufs=args.loudness)
