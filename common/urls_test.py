import pytest

from common.urls import callback_refusal, forbidden_address, host_address, http_url


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/x", "https://rep-1.cells.example:443", "http://[::1]:1/"])
def test_http_urls_are_taken_as_written(url: str) -> None:
    assert http_url(url) == url


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://host/", "only http and https"),
    ("host:8080", "only http and https"),
    ("http://", "no host"),
    ("http://host:99999/", "not a URL"),
    ("http://ho st/", "whitespace"),
    ("http://host/\0", "control character"),
    ("http://h/" + "x" * 3000, "longer than"),
])
def test_what_is_not_an_http_url_says_why(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        http_url(url)


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "2852039166",
        "0xa9.0xfe.0xa9.0xfe",
        "0251.0376.0251.0376",
        "169.254.43518",
        "[::ffff:169.254.169.254]",
    ],
)
def test_every_spelling_of_the_metadata_address_reads_as_it(host: str) -> None:
    assert str(host_address(host)) == "169.254.169.254"


@pytest.mark.parametrize("url", ["http://169.254.169.254/", "http://169.254.0.1/", "http://[fe80::1%25eth0]/",
                                 "http://[fd00:ec2::254]/", "https://metadata.google.internal./", "http://instance-data/"])
def test_link_local_and_metadata_callbacks_are_refused_unless_allowlisted(url: str) -> None:
    assert callback_refusal(url) is not None
    host = url.split("//", 1)[1].split("/", 1)[0]
    assert callback_refusal(url, [host]) is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/done", "https://hooks.example/ci", "http://10.0.0.5/",
                                 "http://[2001:db8::1]/"])
def test_ordinary_callbacks_are_taken(url: str) -> None:
    assert callback_refusal(url) is None


@pytest.mark.parametrize("url", [
    "http://[::169.254.169.254]/",
    "http://[::a9fe:a9fe]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[0:0:0:0:0:ffff:a9fe:a9fe]/",
    "http://[::ffff:169.254.0.1]/",
    "http://[64:ff9b::169.254.169.254]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[2002:a9fe:1::1]/",
])
def test_every_ipv6_spelling_of_a_refused_ipv4_address_is_refused(url: str) -> None:
    assert callback_refusal(url) is not None


@pytest.mark.parametrize("host", ["::169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1"])
def test_forbidden_address_is_one_filter_for_every_spelling(host: str) -> None:
    address = host_address(host)
    assert address is not None and forbidden_address(address) is not None


@pytest.mark.parametrize("host", ["::", "::1", "::ffff:10.0.0.5", "64:ff9b::10.0.0.5", "2002:a00:5::"])
def test_ipv6_spellings_of_ordinary_addresses_are_taken(host: str) -> None:
    address = host_address(host)
    assert address is not None and forbidden_address(address) is None
