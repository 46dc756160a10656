/* Capture files (safetensors): implemented in the capture module. */
typedef int pw_capture_placeholder_t;
