/* ckpt_dir.h - the sharded checkpoint directory writer's check of a save= directory
 * (ckpt_dir.c; its writer, qt_checkpoint_save_dir, is public in qt_io.h).
 */
#ifndef QT_CKPT_DIR_H
#define QT_CKPT_DIR_H

/* The save= check of a sharded checkpoint directory (qt_checkpoint_check_target). */
int qt_ckpt_check_dir_target(const char *key, const char *path, int overwrite);

#endif
