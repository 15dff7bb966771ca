# Root conftest: the k3diff plugin is loaded through its pytest11 entry point once the project is
# installed (`pip install -e .`); nothing else is needed here. pytester (for the plugin's own tests):
pytest_plugins = ["pytester"]
