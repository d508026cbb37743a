"""Index locations: a folder, or a Milvus collection written as one string."""

from __future__ import annotations

import pytest

from langchain_fusion import InvalidParameterError
from langchain_fusion.stores.locations import MILVUS_TOKEN_ENV, MilvusLocation, is_store_location, parse_location


class TestParse:
    @pytest.mark.parametrize(
        ("text", "uri", "collection", "db"),
        [
            ("milvus://localhost:19530/docs", "http://localhost:19530", "docs", None),
            ("milvus://milvus.internal/docs", "http://milvus.internal:19530", "docs", None),
            ("milvus://10.0.0.5:2000/_team_docs2?db=research", "http://10.0.0.5:2000", "_team_docs2", "research"),
            ("milvus://[::1]:19530/docs", "http://[::1]:19530", "docs", None),
            ("milvus+https://in03-abc.zillizcloud.com/docs", "https://in03-abc.zillizcloud.com:443", "docs", None),
            ("milvus+https://host:19530/docs/", "https://host:19530", "docs", None),
            ("milvus+lite:./index.db/docs", "./index.db", "docs", None),
            ("milvus+lite:/var/lib/x.db/Docs_1", "/var/lib/x.db", "Docs_1", None),
        ],
    )
    def test_valid_locations(self, text: str, uri: str, collection: str, db: str | None) -> None:
        location = parse_location(text)
        assert (location.uri, location.collection_name, location.db_name) == (uri, collection, db)
        assert str(location) == text
        assert location.is_lite == text.startswith("milvus+lite:")

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("milvus://localhost:19530/", "collection name ''"),
            ("milvus://localhost:19530/a/b", "collection name 'a/b'"),
            ("milvus://localhost:19530/1docs", "must start with a letter"),
            ("milvus://localhost:19530/my-docs", "only letters"),
            ("milvus://localhost:99999/docs", "port"),
            ("milvus://localhost:port/docs", "port"),
            ("milvus:///docs", "names no server"),
            ("milvus://user:secret@localhost/docs", MILVUS_TOKEN_ENV),
            ("milvus://localhost/docs?token=x", r"location options are \?db=NAME .*, consistency=LEVEL, timeout="),
            ("milvus://localhost/docs?db=a&db=b", r"\?db=NAME"),
            ("milvus://localhost/docs?consistency=fresh", r"consistency level must be one of Strong, Bounded"),
            ("milvus://localhost/docs?consistency=strong&consistency=bounded", "each once"),
            ("milvus+lite:./x.db/docs?db=a", r"location options are \?consistency=LEVEL, timeout=SECONDS"),
            ("milvus://localhost/docs?timeout=0", "timeout is a positive number of seconds, e.g. .* got '0'"),
            ("milvus://localhost/docs?timeout=soon", "timeout is a positive number of seconds"),
            ("milvus+lite:./x.db/docs?timeout=inf", "timeout is a positive number of seconds"),
            ("milvus+lite:./index/docs", "PATH.db/COLLECTION"),
            ("milvus+lite:docs", "PATH.db/COLLECTION"),
            ("milvus+lite:./x.db/" + "a" * 201, "at most 200"),
            ("./folder", "not a Milvus location"),
        ],
    )
    def test_malformed_locations_say_what_is_wrong(self, text: str, message: str) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            parse_location(text)

    def test_timeout_and_other_options_together(self) -> None:
        location = parse_location("milvus://h:1/c?db=team&consistency=bounded&timeout=2.5")
        assert (location.db_name, location.consistency, location.timeout) == ("team", "Bounded", 2.5)
        assert parse_location("milvus+lite:./x.db/c?timeout=10").timeout == 10.0
        assert parse_location("milvus://h/c").timeout is None

    def test_options_are_set_on_a_location_as_a_flag_sets_them(self) -> None:
        from langchain_fusion.stores.registry import engine_for

        milvus = engine_for("milvus://h/c")
        assert milvus.with_options("milvus://h:1/c?db=x", {"timeout": "3"}) == "milvus://h:1/c?db=x&timeout=3"
        assert (
            milvus.with_options("milvus+lite:./a.db/c?timeout=1", {"timeout": "3"}) == "milvus+lite:./a.db/c?timeout=3"
        )
        with pytest.raises(InvalidParameterError, match="timeout is a positive number"):
            milvus.with_options("milvus://h/c", {"timeout": "-1"})
        with pytest.raises(InvalidParameterError, match="folder locations take no options"):
            engine_for("./index").with_options("./index", {"timeout": "3"})

    def test_only_milvus_schemes_are_store_locations(self) -> None:
        assert is_store_location("milvus://h/c") and is_store_location("milvus+lite:x.db/c")
        for other in ("index", "./milvus://x", "milvus.db", "milvus:x", "MILVUS://h/c", None, 5):
            assert not is_store_location(other)


class TestOpen:
    def test_the_token_comes_from_the_environment_and_only_for_servers(self, monkeypatch: pytest.MonkeyPatch) -> None:
        seen: list[dict[str, object]] = []

        class Recorder:
            def __init__(self, uri: str, collection_name: str, **options: object) -> None:
                seen.append({"uri": uri, "collection_name": collection_name, **options})

        monkeypatch.setattr("langchain_fusion.stores.milvus.store.MilvusStore", Recorder)
        monkeypatch.setenv(MILVUS_TOKEN_ENV, "root:Milvus")
        parse_location("milvus://h:1/c?db=team").open()
        parse_location("milvus+lite:./x.db/c").open()
        assert seen == [
            {
                "uri": "http://h:1",
                "collection_name": "c",
                "db_name": "team",
                "token": "root:Milvus",
                "consistency": "Strong",
            },
            {"uri": "./x.db", "collection_name": "c", "consistency": "Strong"},
        ]
        monkeypatch.delenv(MILVUS_TOKEN_ENV)
        MilvusLocation("http://h:1", "c").open()
        assert seen[-1] == {"uri": "http://h:1", "collection_name": "c", "consistency": "Strong"}
        parse_location("milvus+lite:./x.db/c?consistency=eventually").open()
        assert seen[-1] == {"uri": "./x.db", "collection_name": "c", "consistency": "Eventually"}
        parse_location("milvus://h:1/c?timeout=7.5").open()
        assert seen[-1] == {"uri": "http://h:1", "collection_name": "c", "consistency": "Strong", "timeout": 7.5}

    @pytest.mark.parametrize(
        ("text", "level"),
        [
            ("milvus://h/c", "Strong"),
            ("milvus://h/c?consistency=bounded", "Bounded"),
            ("milvus+https://h/c?db=x&consistency=Session", "Session"),
            ("milvus+lite:./x.db/c?consistency=EVENTUALLY", "Eventually"),
        ],
    )
    def test_the_consistency_level_is_a_location_option(self, text: str, level: str) -> None:
        location = parse_location(text)
        assert location.consistency == level and location.collection_name == "c"
