def test_import():
    import elmo_plugin  # noqa: F401
