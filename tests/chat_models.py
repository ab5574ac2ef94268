"""Tiny random MoE models of two families, each with a locally trained tokenizer that
carries a chat template of another family, written here (no downloads):

- qwen3_moe + ChatML (`<|im_start|>role\\n...<|im_end|>\\n`, tool results as a user turn
  in `<tool_response>` tags, as Qwen's templates do). Its generation config names
  `<|im_end|>`, so the server stops there by itself.
- mixtral + Llama-3 headers (`<|start_header_id|>role<|end_header_id|>\\n\\n...<|eot_id|>`,
  a `<|begin_of_text|>` the template writes). Its tokenizer's and generation config's
  eos is `<|end_of_text|>`: the end of a turn, `<|eot_id|>`, must come from the chat
  format (sent as a stop id).

Beside them, templates tested on their tokenizer alone (`TEMPLATES`; no server, SFT or
run test builds them, so the suite's time stays where it was):

- qwen3: Qwen3's own template (thinking switch, reasoning kept or dropped on re-render,
  tool responses inside a user turn), rewritten here to render what the published one
  renders.
- olmoe: OLMoE-Instruct's Tulu-style template, which renders only system, user and
  assistant messages and silently skips any other role (a tool observation).
- glm: GLM-4.5's own template on a Glm4Moe model: nothing closes an assistant message;
  the model's turn ends at the role token that opens the next message (`<|observation|>`,
  `<|user|>`), which its generation config lists as eos ids with `<|endoftext|>`.
- qwen3_coder: Qwen3-Coder's own template on a Qwen3-MoE: ChatML turns, tools listed as
  XML, calls as <tool_call><function=NAME><parameter=K>..., no thinking switch.
- deepseek_v31: DeepSeek-V3.1's own template on a DeepSeek-V3: turns closed by the eos,
  tool outputs followed by no generation prompt, a `thinking` switch that opens <think>
  in the generation prompt after a user message, and earlier reasoning dropped.
- kimi_k2: Kimi-K2-Instruct's own template on a DeepSeek-V3 (Kimi-K2's architecture):
  <|im_user|>/<|im_assistant|>/<|im_system|> headers, <|im_end|> closing every turn, calls
  in <|tool_calls_section_begin|>, no thinking switch.
- llama3_1: Llama-3.1-Instruct's published template, verbatim: a dated system turn, tools
  in the first user message, every text trimmed, tool results JSON-quoted in an `ipython`
  turn, <|eot_id|> closing every turn.
- gpt_oss: gpt-oss's harmony template on a GptOss model: a turn of several messages on
  channels (analysis, commentary, final), a call ended by <|call|> and answered by the
  function's own message, a final answer ended by <|return|>, which the template writes
  as <|end|> once the conversation goes on.

Built by `build_chat_model(family, out)` in a couple of seconds (`chat_tokenizer(name)`
for the tokenizer alone, `chat_tokenizer_dir(name, out)` with its generation config);
tests share one per family (module- or session-scoped fixtures).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    '</tools>\nCall a tool as <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

LLAMA3_TEMPLATE = (
    "<|begin_of_text|>"
    "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


# Llama 3.1's chat template as meta-llama/Llama-3.1-8B-Instruct publishes it (the
# `chat_template` of its tokenizer_config.json, the text shipped since its July 2024
# update), verbatim. What it does that other families do not:
# - a system turn always, with "Cutting Knowledge Date" and "Today Date: 26 Jul 2024"
#   (date_string), "Environment: ipython" when tools are given;
# - tools listed in the first user message by default (tools_in_user_message), that
#   message's text trimmed after them;
# - every system, user and assistant text trimmed (`| trim`);
# - tool results in an `ipython` turn, a string written through `tojson` (a string is
#   iterable in Jinja): the model sees the observation JSON-quoted, newlines as \n;
# - a call as {"name": ..., "parameters": {...}} (custom tools, no <|python_tag|>),
#   the turn closed by <|eot_id|> (<|eom_id|> only with builtin_tools).
LLAMA31_TEMPLATE = r"""{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Qwen3's chat template as Qwen/Qwen3-30B-A3B and Qwen/Qwen3-8B publish it
# (tokenizer_config.json, revision 895c8d171bc03c30e113cd7a28c02494b5e068b7 of Qwen3-8B),
# written anew here: the same text for system, user, assistant and tool messages with
# string content. What it does, as the published one does:
# - tools: a system turn listing them in <tools></tools>, the system prompt first;
# - the last user query is the last user message not wrapped in <tool_response>;
#   assistant turns after it keep their reasoning (<think>\nR\n</think>\n\n, always for
#   the last message, otherwise only when there is some), turns before it lose it;
# - tool messages go in one user turn per run of them, each in <tool_response> tags;
# - the generation prompt closes an empty <think> block when enable_thinking is false.
# Not rendered (this project never sends them): `tool_calls` fields of assistant messages.
QWEN3_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_start|>system\n' -}}"
    "{%- if messages[0].role == 'system' -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}"
    "{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}"
    "{%- for t in tools -%}{{- '\n' + (t | tojson) -}}{%- endfor -%}"
    "{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call><|im_end|>\n' -}}"
    "{%- elif messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- set ns = namespace(last_query=messages|length - 1, searching=true) -%}"
    "{%- for i in range(messages|length - 1, -1, -1) -%}"
    "{%- set q = messages[i] -%}"
    "{%- if ns.searching and q.role == 'user' and q.content is string and not "
    "(q.content.startswith('<tool_response>') and q.content.endswith('</tool_response>')) -%}"
    "{%- set ns.searching = false -%}{%- set ns.last_query = i -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m.content if m.content is string else '' -%}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) -%}"
    "{{- '<|im_start|>' + m.role + '\n' + content + '<|im_end|>\n' -}}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}"
    "{%- if m.reasoning_content is not string and '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}"
    "{{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -}}"
    "{%- else -%}"
    "{{- '<|im_start|>assistant\n' + content -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\n\n</think>\n\n' -}}{%- endif -%}"
    "{%- endif -%}"
)

# OLMoE-1B-7B-0924-Instruct's template (allenai, the Tulu format), written anew: roles as
# plain-text headers, assistant turns closed by the eos token, and no branch for any
# other role, so a tool message renders as nothing at all.
OLMOE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ '<|system|>\n' + m['content'] + '\n' }}"
    "{% elif m['role'] == 'user' %}{{ '<|user|>\n' + m['content'] + '\n' }}"
    "{% elif m['role'] == 'assistant' %}{{ '<|assistant|>\n' + m['content'] + eos_token }}"
    "{% if not loop.last %}{{ '\n' }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
    "{% endfor %}"
)

# GLM-4.5's chat template as zai-org/GLM-4.5 publishes it (chat_template.jinja on the Hub,
# shared by GLM-4.5-Air and GLM-4.6), read from copies that quote it: llama.cpp's
# models/templates/glm_4_5.jinja at 623f3dd04b05999ffcb598a88d4f79fa9c3af849 (its tool-call
# branch is llama.cpp's own) and the template a GLM-4.5-Air GGUF prints in ik_llama.cpp's
# discussion 753; the Hub file's own revision was not read. Written anew here, rendering the
# same text for system, user, assistant and tool messages with string content (compared
# with that text over thinking on/off/unset, tools, generation prompt). What it does:
# - `[gMASK]<sop>` opens every conversation; role headers are the special tokens
#   <|system|>, <|user|>, <|assistant|>, <|observation|>, each followed by a newline except
#   <|assistant|> and <|observation|>;
# - nothing closes a message: an assistant turn ends where the next header begins;
# - tools: a system turn listing them in <tools></tools>, before every message;
# - assistant turns after the last user message keep their reasoning as
#   \n<think>REASONING</think> (stripped); every other turn gets an empty \n<think></think>;
#   then \nCONTENT (stripped) when there is any;
# - tool messages: <|observation|> once per run of them, each in <tool_response> tags;
# - enable_thinking false: /nothink after each user message, and the generation prompt
#   closes an empty \n<think></think>.
# Not rendered (this project never sends them): `tool_calls` fields of assistant messages
# (GLM's <tool_call>NAME<arg_key>..</arg_key><arg_value>..</arg_value></tool_call>) and
# list contents. GLM-4.7's template differs (no newline after headers, a generation prompt
# that opens <think>); this is GLM-4.5's.
GLM_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- if tools -%}"
    "{{- '<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' -}}"
    "{%- for t in tools -%}{{- (t | tojson(ensure_ascii=False)) + '\n' -}}{%- endfor -%}"
    "{{- '</tools>\n\nFor each function call, output the function name and arguments within the following "
    "XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
    "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>' -}}"
    "{%- endif -%}"
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m.content if m.content is string else '' -%}"
    "{%- if m.role == 'user' -%}"
    "{{- '<|user|>\n' + content -}}"
    "{%- if enable_thinking is defined and not enable_thinking and not content.endswith('/nothink') -%}"
    "{{- '/nothink' -}}"
    "{%- endif -%}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}"
    "{%- if m.reasoning_content is not string and '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\n') -%}"
    "{%- endif -%}"
    "{%- if loop.index0 > ns.last_user and reasoning -%}"
    "{{- '<|assistant|>\n<think>' + reasoning.strip() + '</think>' -}}"
    "{%- else -%}"
    "{{- '<|assistant|>\n<think></think>' -}}"
    "{%- endif -%}"
    "{%- if content.strip() -%}{{- '\n' + content.strip() -}}{%- endif -%}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|observation|>' -}}{%- endif -%}"
    "{{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}"
    "{%- elif m.role == 'system' -%}"
    "{{- '<|system|>\n' + content -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|assistant|>' -}}"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '\n<think></think>' -}}{%- endif -%}"
    "{%- endif -%}"
)


# Qwen3-Coder's chat template as Qwen/Qwen3-Coder-30B-A3B-Instruct publishes it (chat_template.jinja), read
# from the copy vLLM ships as examples/tool_chat_template_qwen3coder.jinja at
# 7a3bde4c9988d419449263a80f79e5d586e872a4 (6211 bytes, the size of llama.cpp's models/templates/Qwen3-Coder.jinja
# in a mirror at 71768d0036b49cd39208c0905183203c0f62e8d9); the Hub file's own revision was not read. Written anew
# here, rendering the same text for system, user, assistant (content or `tool_calls` with dict arguments) and tool
# messages, with and without tools (compared with that text). What it does:
# - ChatML turns closed by <|im_end|>\n; no thinking switch (Qwen3-Coder does not reason);
# - tools: the system turn (a default one when there is none) lists each tool as XML (<function><name>,
#   <description>, <parameters> with one <parameter> per property, other schema keys as <KEY>VALUE</KEY>, lists
#   and mappings as JSON), then shows the call format;
# - a call: <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>, non-text
#   values as JSON (a number as its text), calls one after another; any content before them, trimmed;
# - tool messages: one user turn per run of them, each in <tool_response> tags.
QWEN3_CODER_TEMPLATE = (
    "{%- macro schema_keys(d, handled) -%}"
    "{%- if d is mapping -%}{%- for k in d if k not in handled -%}"
    "{%- set v = d[k] -%}"
    "{{- '\n<' ~ k ~ '>' ~ ((v | tojson) if v is mapping or (v is sequence and v is not string) else (v | string)) "
    "~ '</' ~ k ~ '>' -}}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
    "{%- set listed = tools is defined and tools is iterable and tools | length > 0 -%}"
    "{%- set own_system = messages[0].role == 'system' -%}"
    "{%- if own_system or listed -%}"
    "{{- '<|im_start|>system\n' + (messages[0].content if own_system else "
    "'You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.') -}}"
    "{%- if listed -%}"
    "{{- '\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>' -}}"
    "{%- for t in tools -%}"
    "{%- set f = t.function if t.function is defined else t -%}"
    "{{- '\n<function>\n<name>' ~ f.name ~ '</name>' -}}"
    "{%- if f.description is defined -%}{{- '\n<description>' ~ (f.description | trim) ~ '</description>' -}}"
    "{%- endif -%}"
    "{{- '\n<parameters>' -}}"
    "{%- if f.parameters is defined and f.parameters is mapping and f.parameters.properties is defined "
    "and f.parameters.properties is mapping -%}"
    "{%- for name, p in f.parameters.properties | items -%}"
    "{{- '\n<parameter>\n<name>' ~ name ~ '</name>' -}}"
    "{%- if p.type is defined -%}{{- '\n<type>' ~ (p.type | string) ~ '</type>' -}}{%- endif -%}"
    "{%- if p.description is defined -%}{{- '\n<description>' ~ (p.description | trim) ~ '</description>' -}}"
    "{%- endif -%}"
    "{{- schema_keys(p, ['name', 'type', 'description']) ~ '\n</parameter>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- schema_keys(f.parameters, ['type', 'properties']) ~ '\n</parameters>' -}}"
    "{{- schema_keys(f, ['type', 'name', 'description', 'parameters']) ~ '\n</function>' -}}"
    "{%- endfor -%}"
    "{{- '\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in "
    "natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer "
    "the question like normal with your current knowledge and do not tell the user about function calls\n"
    "</IMPORTANT>' -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- for m in (messages[1:] if own_system else messages) -%}"
    "{%- if m.role == 'assistant' and m.tool_calls is defined and m.tool_calls is iterable "
    "and m.tool_calls | length > 0 -%}"
    "{{- '<|im_start|>assistant' -}}"
    "{%- if m.content is defined and m.content is string and m.content | trim | length > 0 -%}"
    "{{- '\n' + (m.content | trim) + '\n' -}}"
    "{%- endif -%}"
    "{%- for c in m.tool_calls -%}"
    "{%- set call = c.function if c.function is defined else c -%}"
    "{{- '\n<tool_call>\n<function=' + call.name + '>\n' -}}"
    "{%- if call.arguments is defined -%}{%- for k, v in call.arguments | items -%}"
    "{{- '<parameter=' + k + '>\n' "
    "+ ((v | tojson) if v is mapping or (v is sequence and v is not string) else (v | string)) "
    "+ '\n</parameter>\n' -}}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '</function>\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.previtem and loop.previtem.role != 'tool' -%}{{- '<|im_start|>user\n' -}}{%- endif -%}"
    "{{- '<tool_response>\n' + m.content + '\n</tool_response>\n' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
)


# DeepSeek-V3.1's chat template as deepseek-ai/DeepSeek-V3.1 publishes it (tokenizer_config.json), read from the
# template a DeepSeek-V3.1 GGUF prints at start-up (a server log quoted in ik_llama.cpp's issues) and llama.cpp's
# models/templates/deepseek-ai-DeepSeek-V3.1.jinja at 0374c5b6e4c19370262d93e2c3f2a98c9af9fe1f (which also reads
# enable_thinking, its own addition); the Hub file's own revision was not read. Written anew here, rendering the
# same text for system, user, assistant (content or `tool_calls` with JSON-text arguments) and tool messages, with
# `thinking` true, false or unset (compared with that text). What it does:
# - the bos token, then every system message's text joined by blank lines;
# - <｜User｜>TEXT; an assistant message after a user one opens with <｜Assistant｜></think> (its reasoning dropped:
#   only the text after a </think> is kept), one after a tool output is its content as written; every assistant
#   message ends with <｜end▁of▁sentence｜>, the eos;
# - tool outputs: <｜tool▁output▁begin｜>TEXT<｜tool▁output▁end｜>, and no generation prompt after them: the
#   model's next turn follows at once;
# - the thinking switch is `thinking` (default off): the generation prompt after a user message is
#   <｜Assistant｜><think> with it on, <｜Assistant｜></think> with it off;
# - calls: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>.
# The published template renders no tools; with tools this one adds the tool prompt the model card lays out after
# the system prompt ("## Tools", a "### NAME" / "Description:" / "Parameters: JSON" block per tool, the call
# format), as Ollama's DeepSeek renderer writes it at 7b95087b9d26f371f78cd8af3144d9f5575e890c.
DEEPSEEK_V31_TEMPLATE = (
    "{%- set think = thinking if thinking is defined else false -%}"
    "{%- set ns = namespace(system='', first=true, after_user=false, after_tool=false) -%}"
    "{%- for m in messages if m.role == 'system' -%}"
    "{%- set ns.system = ('' if ns.first else ns.system + '\n\n') + m.content -%}{%- set ns.first = false -%}"
    "{%- endfor -%}"
    "{%- if tools is defined and tools -%}"
    "{%- set ns.system = ns.system + '\n\n## Tools\nYou have access to the following tools:\n' -%}"
    "{%- for t in tools -%}"
    "{%- set ns.system = ns.system + '\n### ' + t.function.name + '\nDescription: ' + t.function.description "
    "+ '\n\nParameters: ' + (t.function.parameters | tojson) + '\n' -%}"
    "{%- endfor -%}"
    "{%- set ns.system = ns.system + '\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n"
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>"
    "{{additional_tool_calls}}<｜tool▁calls▁end｜>\n\nWhere:\n\n- `tool_call_name` must be an exact match to one of "
    "the available tools\n- `tool_call_arguments` must be valid JSON that strictly follows the tool\\'s Parameters "
    "Schema\n- For multiple tool calls, chain them directly without separators or spaces\n' -%}"
    "{%- endif -%}"
    "{{- bos_token + ns.system -}}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'user' -%}"
    "{{- '<｜User｜>' + m.content -}}"
    "{%- set ns.after_user = true -%}{%- set ns.after_tool = false -%}"
    "{%- elif m.role == 'assistant' and m.tool_calls is defined and m.tool_calls is not none -%}"
    "{%- if ns.after_user -%}{{- '<｜Assistant｜></think>' -}}{%- endif -%}"
    "{%- for c in m.tool_calls -%}"
    "{%- if loop.first -%}{{- ('' if m.content is none else m.content) + '<｜tool▁calls▁begin｜>' -}}{%- endif -%}"
    "{{- '<｜tool▁call▁begin｜>' + c.function.name + '<｜tool▁sep｜>' + c.function.arguments + '<｜tool▁call▁end｜>' -}}"
    "{%- endfor -%}"
    "{{- '<｜tool▁calls▁end｜><｜end▁of▁sentence｜>' -}}"
    "{%- set ns.after_user = false -%}{%- set ns.after_tool = false -%}"
    "{%- elif m.role == 'assistant' -%}"
    "{%- if ns.after_user -%}"
    "{{- '<｜Assistant｜>' + ('<think>' if m.prefix is defined and m.prefix and think else '</think>') -}}"
    "{%- endif -%}"
    "{%- set kept = m.content if ns.after_tool or '</think>' not in m.content else m.content.split('</think>', 1)[1] -%}"
    "{{- kept + '<｜end▁of▁sentence｜>' -}}"
    "{%- set ns.after_user = false -%}{%- set ns.after_tool = false -%}"
    "{%- elif m.role == 'tool' -%}"
    "{{- '<｜tool▁output▁begin｜>' + m.content + '<｜tool▁output▁end｜>' -}}"
    "{%- set ns.after_user = false -%}{%- set ns.after_tool = true -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt and ns.after_user and not ns.after_tool -%}"
    "{{- '<｜Assistant｜>' + ('<think>' if think else '</think>') -}}"
    "{%- endif -%}"
)


# Kimi-K2's chat template as moonshotai/Kimi-K2-Instruct-0905 publishes it (chat_template.jinja), read from copies
# quoted in public repositories (one stating it is that Hub file, a llama.cpp regression test, and the earlier
# models/templates/moonshotai-Kimi-K2.jinja of llama.cpp at 02f4a631678bc435c5cea7a54ab4222ee32e8453, which has no
# calls), checked against another project's renderer test of what Kimi-K2-Instruct's tokenizer renders with tools,
# calls and tool results; the Hub file's own revision was not read. Written anew here, rendering the same text for
# system, user, assistant (content or `tool_calls`) and tool messages with string content (compared with that text).
# What it does:
# - tools: a first turn <|im_system|>tool_declare<|im_middle|>\n  # Tools\n  JSON<|im_end|>;
# - a default system turn (You are Kimi, ...) when the first message is not a system one;
# - each message: <|im_user|>, <|im_assistant|> or <|im_system|> (every other role), its name or role,
#   <|im_middle|>, its text, <|im_end|>: the end of every turn, including the model's;
# - calls: <|tool_calls_section_begin|><|tool_call_begin|>ID<|tool_call_argument_begin|>JSON<|tool_call_end|>...
#   <|tool_calls_section_end|> after any content; Kimi's call ids are functions.NAME:INDEX;
# - tool results: <|im_system|>tool<|im_middle|>## Return of ID\n    TEXT, the ID a message's tool_call_id (this
#   project sends none, so it renders empty);
# - no thinking switch (Kimi-K2-Instruct does not reason).
# Not rendered: list contents (text parts and image placeholders).
KIMI_K2_TEMPLATE = (
    "{%- if tools -%}"
    "{{- '<|im_system|>tool_declare<|im_middle|>\n  # Tools\n  ' ~ (tools | tojson) ~ '<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if loop.first and m.role != 'system' -%}"
    "{{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}"
    "{%- endif -%}"
    "{%- set opener = {'user': '<|im_user|>', 'assistant': '<|im_assistant|>'}.get(m.role, '<|im_system|>') -%}"
    "{{- opener ~ (m.name if m.name is defined and m.name else m.role) ~ '<|im_middle|>' -}}"
    "{%- if m.role == 'assistant' and m.tool_calls is defined and m.tool_calls -%}"
    "{%- if m.content -%}{{- m.content -}}{%- endif -%}"
    "{{- '<|tool_calls_section_begin|>' -}}"
    "{%- for c in m.tool_calls -%}"
    "{%- set args = c.function.arguments -%}"
    "{{- '<|tool_call_begin|>' ~ c.id ~ '<|tool_call_argument_begin|>' "
    "~ (args if args is string else args | tojson) ~ '<|tool_call_end|>' -}}"
    "{%- endfor -%}"
    "{{- '<|tool_calls_section_end|>' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{{- '## Return of ' ~ m.tool_call_id ~ '\n    ' ~ m.content -}}"
    "{%- elif m.content is string -%}"
    "{{- m.content -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}{%- endif -%}"
)


# gpt-oss's harmony template (openai/gpt-oss-20b, chat_template.jinja as published with the
# model in August 2025), rewritten here to render what it renders for this project's
# conversations: a dated system message naming the channels, the system prompt and the
# tools (a TypeScript namespace) in a developer message, reasoning kept only for calls not
# followed by a final answer, a call as `<|start|>assistant to=functions.NAME<|channel|>
# commentary json<|message|>ARGS<|call|>`, its reply from `functions.NAME`, JSON-quoted,
# final answers closed by <|end|> (by <|return|> only as the last message of a training
# text), and `<|start|>assistant` as the generation prompt. Not rendered here: the built-in
# browser and python tools, nullable, array and union parameter types, defaults.
GPT_OSS_TEMPLATE = r"""
{%- macro param_type(spec) -%}
{%- if spec.type == 'string' and spec.enum -%}{{- '"' + spec.enum | join('" | "') + '"' -}}
{%- elif spec.type == 'string' -%}string
{%- elif spec.type in ['integer', 'number'] -%}number
{%- elif spec.type == 'boolean' -%}boolean
{%- else -%}any{%- endif -%}
{%- endmacro -%}
{%- macro analysis(text) -%}{{- '<|start|>assistant<|channel|>analysis<|message|>' + text + '<|end|>' -}}{%- endmacro -%}
{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n' -}}
{{- 'Current date: ' + strftime_now('%Y-%m-%d') + '\n\nReasoning: ' -}}
{{- (reasoning_effort if reasoning_effort is defined else 'medium') + '\n\n' -}}
{{- '# Valid channels: analysis, commentary, final. Channel must be included for every message.' -}}
{%- if tools -%}{{- "\nCalls to these tools must go to the commentary channel: 'functions'." -}}{%- endif -%}
{{- '<|end|>' -}}
{%- set first = messages[0].role if messages else '' -%}
{%- set instructions = messages[0].content if first in ['system', 'developer'] else '' -%}
{%- set rest = messages[1:] if first in ['system', 'developer'] else messages -%}
{%- if instructions or tools -%}
{{- '<|start|>developer<|message|>' -}}
{%- if instructions -%}{{- '# Instructions\n\n' + instructions + '\n\n' -}}{%- endif -%}
{%- if tools -%}
{{- '# Tools\n\n## functions\n\nnamespace functions {\n\n' -}}
{%- for t in tools -%}
{%- set f = t.function -%}
{{- '// ' + f.description + '\ntype ' + f.name + ' = ' -}}
{%- if f.parameters and f.parameters.properties -%}
{{- '(_: {\n' -}}
{%- for name, spec in f.parameters.properties.items() -%}
{%- if spec.description -%}{{- '// ' + spec.description + '\n' -}}{%- endif -%}
{{- name + ('' if name in (f.parameters.required or []) else '?') + ': ' + param_type(spec) + ',\n' -}}
{%- endfor -%}
{{- '}) => any;\n\n' -}}
{%- else -%}{{- '() => any;\n\n' -}}{%- endif -%}
{%- endfor -%}
{{- '} // namespace functions' -}}
{%- endif -%}
{{- '<|end|>' -}}
{%- endif -%}
{%- set called = namespace(name=none) -%}
{%- for m in rest -%}
{%- if m.role == 'assistant' -%}
{%- for text in [m.content, m.thinking] -%}
{%- if text and ('<|channel|>analysis<|message|>' in text or '<|channel|>final<|message|>' in text) -%}
{{- raise_exception('pass analysis text in the thinking field and final text in the content field, not <|channel|> tags') -}}
{%- endif -%}
{%- endfor -%}
{%- if m.tool_calls -%}
{%- set later = namespace(final=false) -%}
{%- for n in rest[loop.index:] -%}{%- if n.role == 'assistant' and not n.tool_calls -%}{%- set later.final = true -%}{%- endif -%}{%- endfor -%}
{%- set call = m.tool_calls[0].function if m.tool_calls[0].function else m.tool_calls[0] -%}
{%- if m.content and m.thinking -%}{{- raise_exception('content and thinking both given with a tool call') -}}
{%- elif not later.final and (m.content or m.thinking) -%}{{- analysis(m.content or m.thinking) -}}{%- endif -%}
{{- '<|start|>assistant to=functions.' + call.name + '<|channel|>commentary ' -}}
{{- (call.content_type if call.content_type is defined else 'json') + '<|message|>' + call.arguments | tojson + '<|call|>' -}}
{%- set called.name = call.name -%}
{%- elif loop.last and not add_generation_prompt -%}
{%- if m.thinking is defined -%}{{- analysis(m.thinking) -}}{%- endif -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|return|>' -}}
{%- else -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + m.content + '<|end|>' -}}
{%- set called.name = none -%}
{%- endif -%}
{%- elif m.role == 'tool' -%}
{%- if called.name is none -%}{{- raise_exception('a tool message with no assistant tool call before it') -}}{%- endif -%}
{{- '<|start|>functions.' + called.name + ' to=assistant<|channel|>commentary<|message|>' + m.content | tojson + '<|end|>' -}}
{%- elif m.role == 'user' -%}
{{- '<|start|>user<|message|>' + m.content + '<|end|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}"""


# Llama 3's pre-tokenizer pattern (tokenizer.json of Llama-3.1-8B-Instruct: a Split, isolated, then ByteLevel without its own regex).
LLAMA3_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


@dataclass(frozen=True)
class TemplateFamily:
    family: str  # engines/model/families.py
    template: str
    special_tokens: tuple[str, ...]
    eos: str  # the tokenizer's eos token
    pad: str
    bos: str | None
    generation_eos: tuple[str, ...]  # generation_config.json eos ids
    end_of_turn: str  # what closes an assistant turn in the template (GLM: the observation's header)
    # The family's own pre-tokenizer split, where its token boundaries matter to the template
    # (None: byte-level BPE's default split, as engines/model/tokenizer.py trains it).
    split_pattern: str | None = None


FAMILIES: dict[str, TemplateFamily] = {
    "chatml": TemplateFamily(
        "qwen3_moe",
        CHATML_TEMPLATE,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
        eos="<|im_end|>",
        pad="<|endoftext|>",
        bos=None,
        generation_eos=("<|im_end|>", "<|endoftext|>"),
        end_of_turn="<|im_end|>",
    ),
    "llama3": TemplateFamily(
        "mixtral",
        LLAMA3_TEMPLATE,
        ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|pad|>"),
        eos="<|end_of_text|>",
        pad="<|pad|>",
        bos="<|begin_of_text|>",
        generation_eos=("<|end_of_text|>",),
        end_of_turn="<|eot_id|>",
    ),
}
# Every test template: FAMILIES (served and fine-tuned by the suite; llama3 also run end to
# end, test_trackers.py) and those tested on their tokenizer and the scripted generator only.
TEMPLATES: dict[str, TemplateFamily] = {
    **FAMILIES,
    "qwen3": TemplateFamily(
        "qwen3_moe",
        QWEN3_TEMPLATE,
        ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"),
        eos="<|im_end|>",  # Qwen3's instruct tokenizer_config.json names <|im_end|>
        pad="<|endoftext|>",
        bos=None,
        generation_eos=("<|im_end|>", "<|endoftext|>"),
        end_of_turn="<|im_end|>",
    ),
    "olmoe": TemplateFamily(
        "qwen3_moe",  # the architecture is not what is tested here
        OLMOE_TEMPLATE,
        ("<|endoftext|>", "<|padding|>"),
        eos="<|endoftext|>",
        pad="<|padding|>",
        bos="<|endoftext|>",  # OLMoE's bos is its eos
        generation_eos=("<|endoftext|>",),
        end_of_turn="<|endoftext|>",
    ),
    "glm": TemplateFamily(
        "glm4_moe",
        GLM_TEMPLATE,
        (
            *("<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>"),
            *("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"),
            *("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
            *("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        ),
        eos="<|endoftext|>",  # GLM-4.5's tokenizer_config.json: eos and pad <|endoftext|>, no bos
        pad="<|endoftext|>",
        bos=None,
        # generation_config.json's eos_token_id [151329, 151336, 151338], in that order (the ids of these three).
        generation_eos=("<|endoftext|>", "<|user|>", "<|observation|>"),
        end_of_turn="<|observation|>",  # nothing closes a turn; the model stops at the next header
    ),
    "qwen3_coder": TemplateFamily(
        "qwen3_moe",  # Qwen3-Coder-30B-A3B-Instruct is a Qwen3MoeForCausalLM
        QWEN3_CODER_TEMPLATE,
        (
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            *("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
        ),
        eos="<|im_end|>",  # tokenizer_config.json: eos <|im_end|>, pad <|endoftext|>, no bos
        pad="<|endoftext|>",
        bos=None,
        generation_eos=("<|im_end|>", "<|endoftext|>"),  # generation_config.json's eos_token_id [151645, 151643]
        end_of_turn="<|im_end|>",
    ),
    "deepseek_v31": TemplateFamily(
        "deepseek_v3",  # DeepSeek-V3.1 is a DeepseekV3ForCausalLM
        DEEPSEEK_V31_TEMPLATE,
        (
            *(
                "<｜begin▁of▁sentence｜>",
                "<｜end▁of▁sentence｜>",
                "<｜User｜>",
                "<｜Assistant｜>",
                "<think>",
                "</think>",
            ),
            *("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>"),
            *("<｜tool▁sep｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"),
        ),
        eos="<｜end▁of▁sentence｜>",  # tokenizer_config.json: bos <｜begin▁of▁sentence｜>, eos and pad <｜end▁of▁sentence｜>
        pad="<｜end▁of▁sentence｜>",
        bos="<｜begin▁of▁sentence｜>",
        generation_eos=("<｜end▁of▁sentence｜>",),  # generation_config.json's eos_token_id 1
        end_of_turn="<｜end▁of▁sentence｜>",
    ),
    "llama3_1": TemplateFamily(
        "mixtral",  # Llama 3.1 is dense (LlamaForCausalLM); the architecture is not what is tested here
        LLAMA31_TEMPLATE,
        (
            *("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>"),
            *("<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"),
        ),
        eos="<|eot_id|>",  # Llama-3.1-8B-Instruct's tokenizer_config.json: bos <|begin_of_text|>, eos <|eot_id|>
        pad="<|finetune_right_pad_id|>",  # it names no pad token; this reserved one is its usual choice
        bos="<|begin_of_text|>",
        # generation_config.json's eos_token_id [128001, 128008, 128009], in that order (the ids of these three).
        generation_eos=("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"),
        end_of_turn="<|eot_id|>",
        # Its tokenizer.json's Split before the byte-level step: "\n\n" after a header is one
        # piece whatever follows, so a turn sampled after the generation prompt's "\n\n"
        # has the ids a fresh rendering of it has.
        split_pattern=LLAMA3_SPLIT,
    ),
    "kimi_k2": TemplateFamily(
        "deepseek_v3",  # Kimi-K2 is a DeepseekV3ForCausalLM (model_type kimi_k2)
        KIMI_K2_TEMPLATE,
        (
            *("[BOS]", "[EOS]", "[PAD]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>"),
            *("<|im_middle|>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>"),
            *("<|tool_call_argument_begin|>", "<|tool_call_end|>"),
        ),
        eos="[EOS]",  # tokenizer_config.json: bos [BOS], eos [EOS], pad [PAD] (163584, 163585, 163839)
        pad="[PAD]",
        bos="[BOS]",
        generation_eos=("<|im_end|>",),  # config.json's and generation_config.json's eos_token_id 163586
        end_of_turn="<|im_end|>",
    ),
    "gpt_oss": TemplateFamily(
        "gpt_oss",
        GPT_OSS_TEMPLATE,
        (
            *("<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>"),
            *("<|end|>", "<|message|>", "<|call|>"),
        ),
        eos="<|return|>",  # gpt-oss-20b's tokenizer_config.json: bos <|startoftext|>, eos <|return|>, pad <|endoftext|>
        pad="<|endoftext|>",
        bos="<|startoftext|>",  # the template writes none
        # generation_config.json's eos_token_id [200002, 199999, 200012], in that order (the ids of these three).
        generation_eos=("<|return|>", "<|endoftext|>", "<|call|>"),
        end_of_turn="<|return|>",  # a final answer's; a call ends at <|call|>
    ),
}
# The family whose whole run carries the trackers (tests/flows/test_trackers.py), one run for both.
TRACKED_FAMILY = "llama3"


# What the templates outside FAMILIES add to the training texts (FAMILIES' tokenizers stay as they were).
EXTRA_TEXTS: dict[str, list[str]] = {
    "qwen3": ["<think>\nthe test fails: fix add\n</think>\n\n"],
    "olmoe": ["<|system|>\n", "<|user|>\n", "<|assistant|>\n"],
    "glm": ["<|assistant|>\n<think>the test fails: fix add</think>\n", "\n<tool_response>\n", "/nothink"],
    "qwen3_coder": ["<function=view>\n<parameter=path>\nm.py\n</parameter>\n</function>\n", "<tool_response>\n"],
    "deepseek_v31": ["<｜Assistant｜></think>", "<｜tool▁output▁begin｜>", "the test fails: look at add</think>"],
    "kimi_k2": ["<|im_assistant|>assistant<|im_middle|>", "<|im_system|>tool<|im_middle|>## Return of "],
    "llama3_1": ["Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n", "Environment: ipython\n"],
    "gpt_oss": [
        "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ",
        "\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included ",
        "assistant to=functions.view",
        "commentary json",
        "functions.view to=assistant",
        "analysis final",
        "namespace functions {\n\n// ",
        "type view = (_: {\npath: string,\nstart?: number,\n}) => any;\n\n",
    ],
}


def _texts() -> list[str]:
    import json

    from engines.env.task_sources.micro import generate_micro_tasks
    from engines.model.chat_format import SYSTEM_PROMPT, TOOL_CALL_SYSTEM_PROMPT
    from engines.tool_calls import TOOL_SCHEMAS

    problems = [t.problem_statement for t in generate_micro_tasks(30, seed=5)]
    words = ["view m.py\n", "edit m.py 3\n    return x - 1\n", "submit", "test", "FAILED test_m.py::test_add\n"]
    # The tool schemas as the ChatML template lists them, so a prompt with tools fits 512 positions.
    tools = [TOOL_CALL_SYSTEM_PROMPT, *(json.dumps(t) for t in TOOL_SCHEMAS)]
    return [SYSTEM_PROMPT, *tools, *problems, *words] * 20


def chat_tokenizer(name: str):  # -> PreTrainedTokenizerFast
    """The locally trained tokenizer of `TEMPLATES[name]`, carrying its template."""
    from tokenizers import Regex, pre_tokenizers

    from engines.model.tokenizer import train_tokenizer

    spec = TEMPLATES[name]
    tok = train_tokenizer(
        _texts() + EXTRA_TEXTS.get(name, []) * 20,
        1024,
        spec.special_tokens,
        spec.template,
        eos_token=spec.eos,
        pad_token=spec.pad,
        bos_token=spec.bos,
    )
    if spec.split_pattern is not None:  # merges apply inside any split: the trained vocabulary still serves
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(spec.split_pattern), "isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return tok


def chat_tokenizer_dir(name: str, out: Path) -> Path:
    """`TEMPLATES[name]`'s tokenizer and generation config (its eos ids), no weights: all a
    chat format reads, for tests without a model."""
    from transformers import GenerationConfig

    spec, tok = TEMPLATES[name], chat_tokenizer(name)
    tok.save_pretrained(out)
    eos = [tok.convert_tokens_to_ids(t) for t in spec.generation_eos]
    GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id).save_pretrained(
        out
    )
    return out


def build_chat_model(name: str, out: Path) -> Path:
    """A random tiny MoE of `TEMPLATES[name]`, its tokenizer and template, saved to `out`."""
    from engines.model.families import build_tiny
    from engines.trainer.export import export_weights

    spec = TEMPLATES[name]
    tok = chat_tokenizer(name)
    model = build_tiny(spec.family, vocab_size=len(tok), seed=1)
    # Room for a prompt that lists the tool schemas (about 650 tokens); default rope has no table to resize.
    model.config.max_position_embeddings = 1024
    model.generation_config.eos_token_id = [tok.convert_tokens_to_ids(t) for t in spec.generation_eos]
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = tok.bos_token_id
    export_weights(model, tok, str(out), "fp32")
    return out
