"""Whether the configured model can see images (`llm.vision`: auto | on | off).

`auto` decides by the model's name: the families below take images through the Messages API or
OpenAI-compatible `image_url` parts. A model not recognised is taken to be text-only, and the
user is told how to switch vision on, rather than sending it images it would reject or ignore.
"""

from __future__ import annotations

import re

from bruce_bot.config import LLMConfig

_SEEING = re.compile(
    r"claude-(3|sonnet-4|opus-4|haiku-4|4)"  # every Claude 3 and 4 model
    r"|gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|\bo[134]\b|o[134]-"
    r"|llava|bakllava|moondream|minicpm-v|qwen[\w.-]*vl|qwen2\.5-omni|gemma-?3|gemma-?4"
    r"|llama-?3\.2-vision|llama-?4|pixtral|mistral-small-3\.[12]|mistral-medium-3"
    r"|gemini|internvl|phi-?3\.5-vision|phi-?4-multimodal|granite-vision|glm-4\.?\d*v",
    re.IGNORECASE,
)


def model_sees_images(model: str) -> bool:
    """By name only (see the module)."""
    return bool(_SEEING.search(model))


def sees_images(config: LLMConfig) -> bool:
    if config.vision == "on":
        return True
    if config.vision == "off":
        return False
    return model_sees_images(config.model)
