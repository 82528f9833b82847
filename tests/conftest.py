import sys
from pathlib import Path

# the tests import their helper models (core_models, zoo, ...) from this folder
sys.path.insert(0, str(Path(__file__).parent))
