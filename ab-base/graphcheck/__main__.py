from .cli import entry

if __name__ == "__main__":      # importing the module (the import test does) must not run the CLI
    entry()
