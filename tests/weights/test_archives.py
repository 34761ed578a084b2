"""
Model directories and archives (the NLPL repository's zips): loaded as given, by path or URL;
unsafe or damaged archives refused by name, with nothing written outside the cache.
"""
import io
import os
import re
import shutil
import tarfile
import zipfile

import numpy
import pytest
import torch
from allennlp.common.checks import ConfigurationError

from elmo_plugin import ElmoBiLm, ElmoEmbedder, batch_to_ids
from elmo_plugin.weights import archives
from tests.helpers import ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE

IDS = batch_to_ids([["The", "bats", "hang"], ["x"]])


@pytest.fixture(scope="module")
def reference():
    with torch.no_grad():
        return ElmoBiLm(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE, stateful=False)(IDS)["activations"]


def assert_is_the_fixture(bilm: ElmoBiLm, reference) -> None:
    with torch.no_grad():
        for ours, expected in zip(bilm(IDS)["activations"], reference):
            assert torch.equal(ours, expected)


def nlpl_zip(path, wrapper: str = "") -> str:
    """A zip laid out as the NLPL repository's bilm-tf models: model.hdf5, options.json, vocab."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(ELMO_OPTIONS_FILE, wrapper + "options.json")
        archive.write(ELMO_WEIGHT_FILE, wrapper + "model.hdf5")
        archive.writestr(wrapper + "vocab.txt", "<S>\n</S>\n<UNK>\nthe\n")
        archive.writestr(wrapper + "meta.json", '{"id": 1}')
    return str(path)


@pytest.mark.parametrize("wrapper", ["", "199/"])
def test_an_nlpl_zip_loads_given_as_either_file_or_both(tmp_path, cache_directory, reference, wrapper):
    path = nlpl_zip(tmp_path / "199.zip", wrapper)
    for options_file, weight_file in ((None, path), (path, None), (path, path)):
        assert_is_the_fixture(ElmoBiLm(options_file, weight_file, stateful=False), reference)
    # Extracted once, into the cache directory only.
    assert sorted(os.listdir(tmp_path)) == ["199.zip", "cache"]
    assert any(name.endswith("-extracted") for name in os.listdir(cache_directory))


def test_a_model_directory_and_the_embedder(tmp_path, reference):
    directory = tmp_path / "model"
    directory.mkdir()
    shutil.copy(ELMO_OPTIONS_FILE, directory / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, directory / "weights.hdf5")
    assert_is_the_fixture(ElmoBiLm(str(directory), None, stateful=False), reference)
    embedder = ElmoEmbedder(weight_file=str(directory))
    assert embedder.embed_sentence(["The", "bats"]).shape == (3, 2, 32)


def test_a_zip_by_url(tmp_path, cache_directory, server, reference):
    nlpl_zip(server.root / "199.zip")
    assert_is_the_fixture(ElmoBiLm(None, f"{server.url}/199.zip", stateful=False), reference)


def test_a_tarball(tmp_path, cache_directory, reference):
    path = tmp_path / "model.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        archive.add(ELMO_OPTIONS_FILE, "options.json")
        archive.add(ELMO_WEIGHT_FILE, "model.hdf5")
    assert_is_the_fixture(ElmoBiLm(None, str(path), stateful=False), reference)


def zip_with(path, members) -> str:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name), data)
    return str(path)


@pytest.mark.parametrize("member", ["../escaped.txt", "/tmp/absolute.txt", "model/../../escaped.txt",
                                    "C:/escaped.txt"])
def test_members_that_would_land_outside_are_refused(tmp_path, cache_directory, member):
    path = zip_with(tmp_path / "evil.zip", [("options.json", "{}"), (member, "x")])
    with pytest.raises(ConfigurationError, match=re.escape(f"evil.zip holds {member!r}") + ".*leads outside"):
        ElmoBiLm(None, path)
    assert os.listdir(cache_directory) == [] and not (tmp_path.parent / "escaped.txt").exists()


def test_links_in_an_archive_are_refused(tmp_path, cache_directory):
    path = tmp_path / "links.tar"
    with tarfile.open(path, "w") as archive:
        link = tarfile.TarInfo("options.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    with pytest.raises(ConfigurationError, match="links.tar holds 'options.json', a link"):
        ElmoBiLm(None, str(path))


def test_an_archive_that_expands_far_beyond_its_size_is_refused(tmp_path, cache_directory, monkeypatch):
    monkeypatch.setattr(archives, "MAX_EXPANSION_FLOOR", 2**20)
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("model.hdf5", b"\0" * (8 * 2**20))
    with pytest.raises(ConfigurationError, match=r"bomb.zip \(\d[\d,]* bytes\) would expand to 8,388,608 bytes"):
        ElmoBiLm(None, str(path))
    assert os.listdir(cache_directory) == []


def test_a_truncated_or_damaged_archive_is_named(tmp_path, cache_directory):
    whole = nlpl_zip(tmp_path / "whole.zip")
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(open(whole, "rb").read()[:5000])
    with pytest.raises(ConfigurationError, match="truncated.zip is not a readable archive"):
        ElmoBiLm(None, str(truncated))
    # A member whose bytes changed after it was written: the CRC check fails while extracting.
    damaged = tmp_path / "damaged.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.write(ELMO_OPTIONS_FILE, "options.json")
        archive.writestr("model.hdf5", b"HDF" * 1000)
    data = bytearray(buffer.getvalue())
    data[data.index(b"HDFHDF") + 10] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(ConfigurationError, match="damaged.zip cannot be extracted .*CRC"):
        ElmoBiLm(None, str(damaged))
    assert not any(name.endswith("-extracted") for name in os.listdir(cache_directory))


def test_directories_that_hold_no_model_or_two_say_what_they_hold(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README").write_text("nothing")
    with pytest.raises(ConfigurationError, match=r"empty holds README; expected .*published: .*options.json"):
        ElmoBiLm(str(empty), None)
    two = tmp_path / "two"
    two.mkdir()
    shutil.copy(ELMO_OPTIONS_FILE, two / "options.json")
    for name in ("a.hdf5", "b.hdf5"):
        shutil.copy(ELMO_WEIGHT_FILE, two / name)
    with pytest.raises(ConfigurationError, match=r"holds several HDF5 files \(a.hdf5, b.hdf5\)"):
        ElmoBiLm(None, str(two))


def model_sources(tmp_path):
    tmp_path.mkdir(exist_ok=True)
    """The fixture biLM as a model directory, a zip and a tarball."""
    directory = tmp_path / "model_dir"
    directory.mkdir()
    shutil.copy(ELMO_OPTIONS_FILE, directory / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, directory / "weights.hdf5")
    tarball = tmp_path / "model.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(directory, "model")
    return [str(directory), nlpl_zip(tmp_path / "model.zip", "model/"), str(tarball)]


@pytest.fixture
def published_options_never_fetched(monkeypatch):
    """Fails a test that resolves a published options URL (it would download it)."""
    from elmo_plugin.weights import pretrained
    from elmo_plugin.weights.formats import base

    resolve = base.resolve_model_source

    def refuse_published(path_or_url, description):
        assert pretrained.output_dim_of_published(str(path_or_url)) is None, f"fetched {path_or_url}"
        return resolve(path_or_url, description)

    monkeypatch.setattr(base, "resolve_model_source", refuse_published)


def test_the_09_path_reads_a_model_source_with_its_own_options(
    tmp_path, cache_directory, reference, published_options_never_fetched
):
    # AllenNLP 0.9's ElmoEmbedder(weight_file=X): the options argument is the original ELMo's URL.
    from allennlp.commands.elmo import DEFAULT_OPTIONS_FILE
    from allennlp.commands.elmo import ElmoEmbedder as ElmoEmbedder09

    from elmo_plugin import Elmo, ElmoTokenEmbedder

    expected = ElmoEmbedder(ELMO_OPTIONS_FILE, ELMO_WEIGHT_FILE).embed_sentence(["The", "bats", "hang"])
    for source in model_sources(tmp_path):
        embedder = ElmoEmbedder09(weight_file=source, stateful=False)
        numpy_equal = (embedder.embed_sentence(["The", "bats", "hang"]) == expected).all()
        assert numpy_equal, source
        elmo = Elmo(DEFAULT_OPTIONS_FILE, source, 1, stateful=False)
        assert_is_the_fixture(elmo._elmo_lstm, reference)
        from allennlp.common import Params

        token_embedder = ElmoTokenEmbedder.from_params(Params({"weight_file": source, "stateful": False}))
        assert_is_the_fixture(token_embedder._elmo._elmo_lstm, reference)


def test_published_options_beside_a_directory_of_weights_alone_are_still_used(tmp_path, cache_directory):
    # A directory no format reads alone keeps the options it was given (here: fetched, refused).
    from elmo_plugin.weights import pretrained
    from elmo_plugin.weights.formats import base

    directory = tmp_path / "weights_only"
    directory.mkdir()
    shutil.copy(ELMO_WEIGHT_FILE, directory / "weights.hdf5")
    files = []
    real = base.resolve_model_source

    def record(path_or_url, description):
        files.append(path_or_url)
        if path_or_url == pretrained.DEFAULT.options_file:
            raise ConfigurationError("offline")
        return real(path_or_url, description)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(base, "resolve_model_source", record)
        with pytest.raises(ConfigurationError, match="offline"):
            ElmoEmbedder(pretrained.DEFAULT.options_file, str(directory))
    assert files == [str(directory), pretrained.DEFAULT.options_file]


@pytest.mark.parametrize("layout", ["directory", "file"])
def test_weights_without_options_are_refused_in_one_line(tmp_path, layout):
    directory = tmp_path / "weights_only"
    directory.mkdir()
    shutil.copy(ELMO_WEIGHT_FILE, directory / "lm_weights.hdf5")
    source = directory if layout == "directory" else directory / "lm_weights.hdf5"
    with pytest.raises(ConfigurationError) as raised:
        ElmoEmbedder(weight_file=str(source))
    message = str(raised.value)
    assert "\n" not in message
    assert str(source) in message and "--options-file" in message and "options.json" in message


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_replaced_with_the_same_name_and_time_is_read_anew(tmp_path, cache_directory, kind):
    # `cp -p` of another model over the archive: same path, same modification time.
    first = model_sources(tmp_path / "first")  # directory, zip, tarball of the fixture
    path = tmp_path / f"model.{kind}"
    shutil.copy2(first[1] if kind == "zip" else first[2], path)
    before = ElmoBiLm(None, str(path)).weight_arrays()
    stamp = os.stat(path).st_mtime_ns
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(ELMO_OPTIONS_FILE, other / "options.json")
    shutil.copy(ELMO_WEIGHT_FILE, other / "weights.hdf5")
    import h5py

    with h5py.File(other / "weights.hdf5", "r+") as handle:
        handle["CNN_proj/b_proj"][...] = handle["CNN_proj/b_proj"][...] + 1.0
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            for name in ("options.json", "weights.hdf5"):
                archive.write(other / name, f"model/{name}")
    else:
        with tarfile.open(path, "w:gz") as archive:
            archive.add(other, "model")
    os.utime(path, ns=(stamp, stamp))
    after = ElmoBiLm(None, str(path)).weight_arrays()
    assert numpy.allclose(after["CNN_proj/b_proj"], before["CNN_proj/b_proj"] + 1.0)


def test_a_path_with_an_exclamation_mark(tmp_path, cache_directory, reference):
    directory = tmp_path / "models!v2"
    directory.mkdir()
    path = nlpl_zip(directory / "model!.zip")
    assert_is_the_fixture(ElmoBiLm(None, path, stateful=False), reference)
    plain = directory / "options.json"
    shutil.copy(ELMO_OPTIONS_FILE, plain)
    shutil.copy(ELMO_WEIGHT_FILE, directory / "weights!.hdf5")
    assert_is_the_fixture(ElmoBiLm(str(plain), str(directory / "weights!.hdf5"), stateful=False), reference)
