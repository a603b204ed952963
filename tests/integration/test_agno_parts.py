"""Images and files through AgnoRuntime: on Agno's message as its own media, sent by its model class."""

from __future__ import annotations

import base64

import pytest

from dcaf_like import Agent, AgentRequest, ModelRequest, UnsupportedPart, UserTurn, attachment
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("agno", reason="the agno extra is not installed: pip install -e '.[agno]'")

from agno.models.openai import OpenAIChat
from agno.models.openai.like import OpenAILike

from dcaf_like.runtimes.agno import AgnoRuntime

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake pixels").decode()
IMAGE = attachment("image", media_type="image/png", data=PNG)
BY_URL = attachment("image", url="https://example.com/a.png")
REPORT = attachment("file", media_type="application/pdf", data="JVBERi0xLjQ=", name="report.pdf")
ASKED = ModelRequest("Operate.", (UserTurn("what is wrong here?", (IMAGE, BY_URL, REPORT)),))


@pytest.fixture
def server():
    with OpenAICompatibleServer() as server:
        yield server


def user_content(body: dict) -> list[dict]:
    [message] = [m for m in body["messages"] if m["role"] == "user"]
    return message["content"]


@pytest.mark.parametrize("model_class", [OpenAIChat, OpenAILike])
@pytest.mark.parametrize("call", ["invoke", "stream"])
def test_images_and_files_reach_an_openai_model_as_its_apis_parts(server, model_class, call):
    runtime = AgnoRuntime(model_class(id="test-model", base_url=server.base_url, api_key="x"))
    server.reply("A crash loop.")

    answer = runtime.invoke(ASKED) if call == "invoke" else list(runtime.stream(ASKED))[-1].response
    runtime.close()

    assert answer.text == "A crash loop."
    assert runtime.accepts == {"image", "file"}
    assert user_content(server.requests[0]) == [  # Agno's order: files, the text, images
        {
            "type": "file",
            "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
        },
        {"type": "text", "text": "what is wrong here?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]


async def test_the_async_path_sends_the_same_parts(server):
    runtime = AgnoRuntime(OpenAILike(id="test-model", base_url=server.base_url, api_key="x"))
    server.reply("A crash loop.")

    answer = await runtime.ainvoke(ASKED)
    await runtime.aclose()

    assert answer.text == "A crash loop."
    assert [part["type"] for part in user_content(server.requests[0])] == [
        "file",
        "text",
        "image_url",
        "image_url",
    ]


def test_a_model_class_not_known_to_take_parts_refuses_them_unless_told():
    from agno.models.aws import AwsBedrock

    def model() -> AwsBedrock:
        return AwsBedrock(id="anthropic.claude-3-haiku", aws_region="us-east-1")

    blind = Agent(runtime=AgnoRuntime(model()))

    with pytest.raises(UnsupportedPart, match="AwsBedrock"):
        blind.run_request(AgentRequest(text="what is wrong here?", attachments=(IMAGE,)))
    assert AgnoRuntime(model(), accepts={"image"}).accepts == {"image"}


def test_a_file_agnos_file_does_not_take_is_refused_naming_its_media_type(server):
    from dcaf_like import ModelRequestInvalid

    runtime = AgnoRuntime(OpenAILike(id="test-model", base_url=server.base_url, api_key="x"))
    values = attachment("file", media_type="application/yaml", data="a2V5OiB2YWx1ZQ==", name="values.yaml")

    with pytest.raises(UnsupportedPart, match="takes no application/yaml parts"):
        Agent(runtime=runtime).run_request(AgentRequest(text="and this?", attachments=(values,)))
    with pytest.raises(ModelRequestInvalid, match=r"refuses file 'values\.yaml' \(application/yaml\)"):
        runtime.invoke(ModelRequest("", (UserTurn("and this?", (values,)),)))  # a request built by hand
    assert server.requests == []
    assert runtime.takes(REPORT)
