"""One APIRouter per group of endpoints; ``service.app`` includes them all."""
